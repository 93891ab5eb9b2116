// `timeout-center retry`: puts failed timeouts back to pending (attempts 0, available now), so the
// next scan claims them. Selected by timeout id, kind, scan or shard (the failed timeouts of a
// shard, e.g. one abandoned after killing its workers); several selectors narrow each other.
// A failed timeout whose business object already has a live timeout of the same kind is left
// alone (the one-live-per-object rule), and so is all but the newest failed one per object.
import { sql, type ExpressionBuilder, type Kysely } from 'kysely';
import type { Command } from 'commander';
import type { Database } from '../../db/schema.js';
import { assertKind, databaseOption, idList, inputError, jsonOption, parseId, print, printJson, withDatabase, type DbOptions, type DbTimestamp } from './common.js';

interface RetryOptions extends DbOptions {
  json?: boolean;
  id?: number[];
  kind?: string;
  scan?: number;
  shard?: number[];
  dryRun?: boolean;
}

export function registerRetry(program: Command): void {
  program
    .command('retry')
    .description('put failed timeouts back to pending (attempts 0, due now): by --id, --kind, --scan or --shard (combine to narrow)')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .option('--id <ids>', 'failed timeout id(s); repeat or separate with commas', idList('--id'))
    .option('--kind <kind>', 'every failed timeout of this kind')
    .option('--scan <scanId>', 'the failed timeouts of this scan', (v) => parseId(v, '--scan'))
    .option('--shard <ids>', "the failed timeouts of these shard(s) (e.g. a shard abandoned after killing its workers)", idList('--shard'))
    .option('--dry-run', 'only say what would be retried')
    .action(async (opts: RetryOptions) => {
      if (!opts.id && opts.kind === undefined && opts.scan === undefined && !opts.shard) {
        throw inputError('retry needs a selector: --id <ids>, --kind <kind>, --scan <scanId> or --shard <ids> (see `timeout-center failed`)');
      }
      await withDatabase(opts, async (db) => {
        if (opts.kind !== undefined) await assertKind(db, opts.kind);
        const result = await db.transaction().execute((trx) => retry(trx, opts));
        if (opts.json) {
          printJson(result);
          return;
        }
        const verb = opts.dryRun ? 'would retry' : 'retried';
        let text = `${verb} ${result.retried} failed timeout${result.retried === 1 ? '' : 's'}`;
        if (result.matched === 0) text = 'no failed timeouts match (nothing changed); see `timeout-center failed`';
        else if (result.left > 0) {
          text += `; left ${result.left} alone: its business object already has a live timeout of the same kind, or a newer failed one`;
        }
        if (result.notFailed.length > 0) text += `\nnot failed (or unknown) ids: ${result.notFailed.join(', ')}`;
        print(text);
      });
    });
}

export interface RetryResult {
  matched: number;
  retried: number;
  left: number;
  ids: number[];
  notFailed: number[];
  dryRun: boolean;
}

async function retry(db: Kysely<Database>, opts: RetryOptions): Promise<RetryResult> {
  const selected = (eb: ExpressionBuilder<Database, 'timeout_center.timeouts'>) => {
    const conds = [eb('timeout_center.timeouts.state', '=', 'failed')];
    if (opts.id) conds.push(eb('timeout_center.timeouts.id', 'in', opts.id));
    if (opts.kind !== undefined) conds.push(eb('timeout_center.timeouts.kind', '=', opts.kind));
    if (opts.shard) conds.push(eb('timeout_center.timeouts.shard_id', 'in', opts.shard));
    if (opts.scan !== undefined) {
      conds.push(eb('timeout_center.timeouts.shard_id', 'in', eb.selectFrom('timeout_center.shards').select('id').where('scan_id', '=', opts.scan)));
    }
    return eb.and(conds);
  };
  const matched = await db
    .selectFrom('timeout_center.timeouts')
    .select('id')
    .where(selected)
    .orderBy('id')
    .forUpdate()
    .execute();
  // The newest failed timeout per (kind, biz_id), unless that object has a live timeout already.
  const eligible = db
    .selectFrom('timeout_center.timeouts')
    .select('timeout_center.timeouts.id')
    .distinctOn(['timeout_center.timeouts.kind', 'timeout_center.timeouts.biz_id'])
    .where(selected)
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('timeout_center.timeouts as live')
            .select(sql`1`.as('one'))
            .whereRef('live.kind', '=', 'timeout_center.timeouts.kind')
            .whereRef('live.biz_id', '=', 'timeout_center.timeouts.biz_id')
            .where('live.state', 'in', ['pending', 'dispatched']),
        ),
      ),
    )
    .orderBy('timeout_center.timeouts.kind')
    .orderBy('timeout_center.timeouts.biz_id')
    .orderBy('timeout_center.timeouts.id', 'desc');
  let ids: number[];
  if (opts.dryRun) {
    ids = (await eligible.execute()).map((r) => Number(r.id));
  } else {
    const updated = await db
      .updateTable('timeout_center.timeouts')
      .set({
        state: 'pending',
        attempts: 0,
        available_at: sql<DbTimestamp>`now()`,
        finished_at: null,
        result: null,
        shard_id: null,
      })
      .where('id', 'in', eligible)
      .where('state', '=', 'failed')
      .returning('id')
      .execute();
    ids = updated.map((r) => Number(r.id)).sort((a, b) => a - b);
  }
  const matchedIds = new Set(matched.map((r) => Number(r.id)));
  const notFailed = (opts.id ?? []).filter((id) => !matchedIds.has(id));
  return { matched: matched.length, retried: ids.length, left: matched.length - ids.length, ids, notFailed, dryRun: Boolean(opts.dryRun) };
}
