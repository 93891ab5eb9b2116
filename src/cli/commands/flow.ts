// Flow control verbs: `pause <kind>`, `resume <kind>`, `limit <kind> [--max-running-shards N|none]
// [--rate N|none] [--reset]`, and `limit --database <name> --rate N|none | --reset` for a business
// database's fleet-wide rate limit over all its kinds (src/flow/target-controls.ts, sql/0009). Each is one audited UPDATE of timeout_center.kinds
// (src/flow/kind-controls.ts, shared with the console); the leader and the workers read the
// controls at every plan and every shard, so the change applies fleet-wide within a tick, and it
// survives restarts until `limit <kind> --reset` puts the kind back on its config file's values.
import { Option, type Command } from 'commander';
import type pg from 'pg';
import type { KindControls, LimitChange } from '../../flow/kind-controls.js';
import type { TargetControls } from '../../flow/target-controls.js';
import {
  ControlInputError,
  pauseKind,
  resetKindControls,
  resetTargetControls,
  resumeKind,
  setKindLimits,
  setTargetRateLimit,
} from '../../operations/actions.js';
import { actorOption, databaseOption, defaultActor, formatTime, inputError, jsonOption, print, printJson, withDatabase, type DbOptions } from './common.js';

type FlowOptions = DbOptions & { json?: boolean; actor?: string };

/** "none" removes a limit; anything else must be a number (range checked by kind-controls).
 *  "none" stays a string here: commander turns a parser's null into ''. */
function limitValue(flag: string, integer: boolean) {
  return (value: string): number | 'none' => {
    const v = value.trim().toLowerCase();
    if (v === 'none') return 'none';
    const n = Number(v);
    if (v === '' || !Number.isFinite(n) || (integer && !Number.isInteger(n))) {
      throw inputError(`${flag} must be ${integer ? 'a whole number' : 'a number'} above 0, or none to remove the limit; got "${value}"`);
    }
    return n;
  };
}

/** One line per kind: what runs, what holds it, who changed it last. */
export function describeControls(c: KindControls): string {
  const limits = [
    c.paused ? 'PAUSED' : 'running',
    `max running shards ${c.maxRunningShards ?? 'none'}`,
    `rate ${c.rateLimit === null ? 'none' : `${c.rateLimit}/s`}`,
  ].join(', ');
  const now = `${c.runningShards} shard${c.runningShards === 1 ? '' : 's'} running, ${c.queuedShards} queued`;
  const who = c.changedBy ? `; changed by ${c.changedBy} at ${formatTime(c.changedAt)}` : '';
  return `${c.kind}: ${limits} (${now}; from ${c.source === 'config' ? 'the config file' : 'an operator'}${who})`;
}

export function controlsJson(c: KindControls) {
  return {
    kind: c.kind,
    paused: c.paused,
    maxRunningShards: c.maxRunningShards,
    rateLimit: c.rateLimit,
    source: c.source,
    changedBy: c.changedBy,
    changedAt: c.changedAt,
    runningShards: c.runningShards,
    queuedShards: c.queuedShards,
    config: c.config,
  };
}

/** One line per business database: its limit, what runs against it, who changed it last. */
export function describeTargetControls(c: TargetControls): string {
  const limit = `rate ${c.rateLimit === null ? 'none' : `${c.rateLimit}/s`} over ${c.kinds.length ? c.kinds.join(', ') : 'no kind'}`;
  const now = `${c.runningShards} shard${c.runningShards === 1 ? '' : 's'} running, ${c.queuedShards} queued, ${c.inFlightLimit} timeouts in flight`;
  const who = c.changedBy ? `; changed by ${c.changedBy} at ${formatTime(c.changedAt)}` : '';
  return `database ${c.target}: ${limit} (${now}; from ${c.source === 'config' ? 'the config file' : 'an operator'}${who})`;
}

export function targetControlsJson(c: TargetControls) {
  return {
    target: c.target,
    rateLimit: c.rateLimit,
    source: c.source,
    changedBy: c.changedBy,
    changedAt: c.changedAt,
    kinds: c.kinds,
    runningShards: c.runningShards,
    queuedShards: c.queuedShards,
    inFlightLimit: c.inFlightLimit,
    config: c.config,
  };
}

/** Runs one change with its actor and prints the controls after it. */
async function apply<C>(
  opts: FlowOptions,
  change: (pool: pg.Pool, actor: string) => Promise<C>,
  show: { json: (c: C) => unknown; text: (c: C) => string },
): Promise<void> {
  const actor = opts.actor ?? defaultActor();
  await withDatabase(opts, async (_db, pool) => {
    let controls: C;
    try {
      controls = await change(pool, actor);
    } catch (err) {
      if (err instanceof ControlInputError) throw inputError(err.message);
      throw err;
    }
    if (opts.json) printJson(show.json(controls));
    else print(show.text(controls));
  });
}

const kindShow = { json: controlsJson, text: describeControls };
const targetShow = { json: targetControlsJson, text: describeTargetControls };

export function registerFlow(program: Command): void {
  program
    .command('pause')
    .description('pause a kind fleet-wide: within a tick nothing of it starts (its due timeouts wait in the table); running shards finish')
    .argument('<kind>', 'timeout kind, e.g. order.unpaid')
    .addOption(databaseOption())
    .addOption(actorOption())
    .addOption(jsonOption())
    .action(async (kind: string, opts: FlowOptions) => {
      await apply(opts, (pool, actor) => pauseKind(pool, kind, actor), kindShow);
    });

  program
    .command('resume')
    .description('resume a paused kind: its due timeouts are planned again at the next tick')
    .argument('<kind>', 'timeout kind, e.g. order.unpaid')
    .addOption(databaseOption())
    .addOption(actorOption())
    .addOption(jsonOption())
    .action(async (kind: string, opts: FlowOptions) => {
      await apply(opts, (pool, actor) => resumeKind(pool, kind, actor), kindShow);
    });

  program
    .command('limit')
    .description(
      "set a kind's fleet-wide limits (running shards at once, timeouts per second; none removes one), or --reset it to the config file's values; " +
        "with --database <name> instead of a kind: a business database's rate limit over all kinds whose shards run against it",
    )
    .argument('[kind]', 'timeout kind, e.g. order.unpaid (leave out with --database)')
    .option('--database <name>', 'a business database (businessDatabases.<name>): limit the timeouts per second applied against it, all kinds together')
    .addOption(
      new Option('--max-running-shards <n>', 'shards of the kind queued or running at once, fleet-wide (none: no cap)').argParser(
        limitValue('--max-running-shards', true),
      ),
    )
    .addOption(new Option('--rate <n>', 'timeouts per second, fleet-wide (none: no limit)').argParser(limitValue('--rate', false)))
    .option('--reset', "put the kind back on its config file's paused, maxRunningShards and rateLimit (later config changes apply again)")
    .addOption(databaseOption())
    .addOption(actorOption())
    .addOption(jsonOption())
    .action(
      async (
        kind: string | undefined,
        opts: FlowOptions & { maxRunningShards?: number | 'none'; rate?: number | 'none'; reset?: boolean; database?: string },
      ) => {
        if (opts.database !== undefined) {
          const target = opts.database;
          if (kind !== undefined) throw inputError(`give a kind or --database ${target}, not both: a database's limit holds over all its kinds`);
          if (opts.maxRunningShards !== undefined) throw inputError('--max-running-shards is per kind; a business database takes --rate <n|none> or --reset');
          if (opts.reset) {
            if (opts.rate !== undefined) throw inputError("--reset restores the config file's value: give it alone, without --rate");
            await apply(opts, (pool, actor) => resetTargetControls(pool, target, actor), targetShow);
            return;
          }
          if (opts.rate === undefined) throw inputError(`nothing to change: give --rate <n|none> or --reset for database ${target}`);
          const rate = opts.rate === 'none' ? null : opts.rate;
          await apply(opts, (pool, actor) => setTargetRateLimit(pool, target, rate, actor), targetShow);
          return;
        }
        if (kind === undefined) throw inputError('name a kind (limit <kind> ...) or a business database (limit --database <name> ...)');
        const change: LimitChange = {};
        if (opts.maxRunningShards !== undefined) change.maxRunningShards = opts.maxRunningShards === 'none' ? null : opts.maxRunningShards;
        if (opts.rate !== undefined) change.rateLimit = opts.rate === 'none' ? null : opts.rate;
        if (opts.reset) {
          if (Object.keys(change).length > 0)
            throw inputError("--reset restores the config file's values: give it alone, without --max-running-shards or --rate");
          await apply(opts, (pool, actor) => resetKindControls(pool, kind, actor), kindShow);
          return;
        }
        if (Object.keys(change).length === 0) throw inputError('nothing to change: give --max-running-shards <n|none>, --rate <n|none>, or --reset');
        await apply(opts, (pool, actor) => setKindLimits(pool, kind, change, actor), kindShow);
      },
    );
}
