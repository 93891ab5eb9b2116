// `timeout-center retry` (src/operations/: retryAudited, the console's retry too): puts failed
// timeouts back to pending (attempts 0, available now), so the next scan claims them; audited with
// --actor. Selected by timeout id, kind, scan or shard (the failed timeouts of a
// shard, e.g. one abandoned after killing its workers); several selectors narrow each other.
// A failed timeout whose business object already has a live timeout of the same kind is left
// alone (the one-live-per-object rule), and so is all but the newest failed one per object.
import type { Command } from 'commander';
import { retryAudited } from '../../operations/actions.js';
import { retryFailed, type RetryResult } from '../../operations/retry.js';
import { acrossStores, eachStore, forwardAudit, withoutAuditFlag, withStoreOptions } from './across.js';
import { partial } from '../exit-codes.js';
import { actorOption, assertKind, databaseOption, defaultActor, idList, inputError, jsonOption, parseId, print, printJson, type DbOptions } from './common.js';

interface RetryOptions extends DbOptions {
  json?: boolean;
  id?: number[];
  kind?: string;
  scan?: number;
  shard?: number[];
  dryRun?: boolean;
  actor?: string;
}

export function registerRetry(program: Command): void {
  withStoreOptions(program.command('retry'))
    .description('put failed timeouts back to pending (attempts 0, due now): by --id, --kind, --scan or --shard (combine to narrow)')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .option('--id <ids>', 'failed timeout id(s); repeat or separate with commas', idList('--id'))
    .option('--kind <kind>', 'every failed timeout of this kind')
    .option('--scan <scanId>', 'the failed timeouts of this scan', (v) => parseId(v, '--scan'))
    .option('--shard <ids>', 'the failed timeouts of these shard(s) (e.g. a shard abandoned after killing its workers)', idList('--shard'))
    .option('--dry-run', 'only say what would be retried')
    .addOption(actorOption())
    .action(async (opts: RetryOptions) => {
      if (!opts.id && opts.kind === undefined && opts.scan === undefined && !opts.shard) {
        throw inputError('retry needs a selector: --id <ids>, --kind <kind>, --scan <scanId> or --shard <ids> (see `timeout-center failed`)');
      }
      await acrossStores(opts, async (a) => {
        const byId = opts.id !== undefined || opts.scan !== undefined || opts.shard !== undefined;
        // Ids of timeouts, scans and shards are per store; a kind names its stores itself.
        const stores = opts.store !== undefined || !opts.kind ? a.stores : a.directory.storesOfKind(opts.kind);
        if (byId && stores.length > 1) {
          throw inputError(
            `timeout, scan and shard ids are per store: with --id, --scan or --shard, pass --store <name> (${stores.join(', ')}), as \`timeout-center failed\` shows it`,
          );
        }
        const selector = { id: opts.id, kind: opts.kind, scan: opts.scan, shard: opts.shard };
        const actor = opts.actor ?? defaultActor();
        const answers = await eachStore({ ...a, stores }, async (db, _pool, d) => {
          if (opts.kind !== undefined) await assertKind(db, opts.kind);
          // A dry run changes nothing and is not audited; a retry is, as from the console, in the
          // store it changes, and copied to the center's audit_log right after.
          if (opts.dryRun) return { ...(await db.transaction().execute((trx) => retryFailed(trx, { ...selector, dryRun: true }))), auditInCenter: true };
          const result = await retryAudited(db, selector, actor);
          return { ...result, auditInCenter: result.matched === 0 || (await forwardAudit(a, d.store)) };
        });
        if (opts.json) {
          if (!a.multi) printJson(answers[0]!.ok ? withoutAuditFlag(answers[0]!.value) : answers[0]);
          else printJson({ stores: answers.map((r) => (r.ok ? { store: r.store, ...withoutAuditFlag(r.value) } : { store: r.store, unreachable: r.error })) });
        } else {
          for (const r of answers)
            print(
              `${a.multi ? `store ${r.store}: ` : ''}${r.ok ? describeRetry(r.value, Boolean(opts.dryRun)) : `UNREACHABLE (${r.error}): nothing retried there; run again when it answers`}`,
            );
        }
        // Exit 0 only when something was retried and nothing asked for was left: no match, an id
        // that is not failed, a timeout left alone, or a store that did not answer make it 1.
        const done = answers.flatMap((r) => (r.ok ? [r.value] : []));
        const retried = done.reduce((n, r) => n + r.retried, 0);
        if (retried === 0 || done.some((r) => r.left > 0 || r.notFailed.length > 0) || answers.some((r) => !r.ok)) partial();
      });
    });
}

function describeRetry(result: RetryResult & { auditInCenter: boolean }, dryRun: boolean): string {
  const verb = dryRun ? 'would retry' : 'retried';
  let text = `${verb} ${result.retried} failed timeout${result.retried === 1 ? '' : 's'}`;
  if (result.matched === 0) text = 'no failed timeouts match (nothing changed); see `timeout-center failed`';
  else if (result.left > 0) {
    text += `; left ${result.left} alone: its business object already has a live timeout of the same kind, or a newer failed one`;
  }
  if (result.notFailed.length > 0) text += `\nnot failed (or unknown) ids: ${result.notFailed.join(', ')}`;
  if (!result.auditInCenter)
    text += "\n  (audited in the store; the center's database did not answer: the store's leader copies the record to its audit_log when it does)";
  return text;
}
