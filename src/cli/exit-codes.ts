// The one table of exit codes every verb follows (docs/reference/cli.md "Exit codes", and the end of
// every `--help`). A verb never picks a number of its own: it throws one of the errors below (or
// an InputError / ConfigError / UnreachableError from the engine), or sets `partial()` after doing
// what it could; main.ts maps the rest.
import { CommanderError } from 'commander';
import { ConfigError } from '../config.js';
import { InputError } from '../input-error.js';
import { UnreachableError } from '../db/reachability.js';
import { SchemaContractError } from '../release/schema-contract.js';
import { OlderProcessesError } from '../db/migrate.js';

export const EXIT = {
  /** Everything asked was done (status: nothing wrong). */
  ok: 0,
  /** Done in part, or nothing to do: the output says what was not done and why. */
  partial: 1,
  /** Bad input: nothing was done; stderr says what to fix. */
  badInput: 2,
  /** A database or Redis it needs does not answer, or its schema is missing or old: nothing was done. */
  unavailable: 3,
  /** Unexpected (a bug): stderr says what failed. */
  unexpected: 4,
} as const;

export const EXIT_CODES_HELP = `Exit codes (the same for every verb):
  0  done: everything asked was done (status: nothing wrong)
  1  done in part, or nothing to do: the output names what was not done and why, e.g. cancel
     cancelled none (or not all) of the ids, retry found no failed timeout to retry, a store did
     not answer or its URL variable is unset (the others were done), status named a problem
  2  bad input, nothing done: an unknown option, kind or store, a bad value, an invalid config
     file; the line on stderr says what to fix
  3  unavailable, nothing done: the database or Redis it needs does not answer, or its schema is
     missing or older than this build (run \`timeout-center migrate\`), or was migrated by a newer
     release that this version may not run beside (run that release); the line on stderr says
     which; then run the same command again
  4  unexpected error (a bug): the line on stderr says what failed; check \`timeout-center status\`
     before running it again`;

/** The database (or Redis) a verb needs cannot serve it: exit 3. */
export class UnavailableError extends Error {
  override name = 'UnavailableError';
}

/** Marks the run as done in part (exit 1) without stopping it: the output says what was not done. */
export function partial(): void {
  if (!process.exitCode) process.exitCode = EXIT.partial;
}

/** The exit code of an error that ended a verb. */
export function exitCodeOf(err: unknown): number {
  if (err instanceof CommanderError) {
    // Ours carry their code (inputError 2, unavailableError 3); commander's usage errors (missing
    // argument, unknown option, ...) are bad input.
    return err.code.startsWith('tc.') && err.exitCode > 0 ? err.exitCode : EXIT.badInput;
  }
  if (err instanceof ConfigError || err instanceof InputError) return EXIT.badInput;
  if (err instanceof UnreachableError || err instanceof UnavailableError || err instanceof SchemaContractError || err instanceof OlderProcessesError)
    return EXIT.unavailable;
  if (isUnavailableError(err)) return EXIT.unavailable;
  return EXIT.unexpected;
}

/** Errors that mean "this database cannot answer now", as opposed to bad input or a bug:
 *  connection failures (ECONNREFUSED, ETIMEDOUT, ...) and PostgreSQL's connection, shutdown,
 *  missing-database and statement-timeout classes. Wider than the pool's isConnectionError (which
 *  decides what a unit of work retries): for a verb's exit code, any of these is exit 3. */
function isUnavailableError(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  if (!e || typeof e !== 'object') return false;
  if (typeof e.code === 'string') return /^E[A-Z]+$/.test(e.code) || /^(08|57|3D)/.test(e.code);
  return typeof e.message === 'string' && /timeout|terminated|Connection/i.test(e.message);
}
