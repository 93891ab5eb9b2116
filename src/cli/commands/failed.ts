// `timeout-center failed [--kind k] [--scan id] [--limit n]`: timeouts that gave up after their
// attempts (view failed_timeouts), newest first, with the error. Retry them with `retry`.
import { sql } from 'kysely';
import type { Command } from 'commander';
import {
  assertKind,
  databaseOption,
  formatTime,
  jsonOption,
  parseId,
  parseLimit,
  print,
  printJson,
  table,
  withDatabase,
  type DbOptions,
  withStoreOptions,
} from './common.js';

export function registerFailed(program: Command): void {
  withStoreOptions(program.command('failed'))
    .description('failed timeouts (gave up after their attempts), newest first, with their last error; retry them with `retry`')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .option('--kind <kind>', 'only this kind')
    .option('--scan <scanId>', 'only timeouts failed in this scan', (v) => parseId(v, '--scan'))
    .option('--limit <n>', 'how many to show', (v) => parseLimit(v), 50)
    .action(async (opts: DbOptions & { json?: boolean; kind?: string; scan?: number; limit: number }) => {
      await withDatabase(opts, async (db) => {
        if (opts.kind !== undefined) await assertKind(db, opts.kind);
        const base = db
          .selectFrom('timeout_center.failed_timeouts')
          .$if(opts.kind !== undefined, (q) => q.where('kind', '=', opts.kind!))
          .$if(opts.scan !== undefined, (q) => q.where('scan_id', '=', opts.scan!));
        const [rows, total] = await Promise.all([
          base.selectAll().orderBy('failed_at', 'desc').orderBy('timeout_id', 'desc').limit(opts.limit).execute(),
          base.select(sql<number>`count(*)::int`.as('n')).executeTakeFirstOrThrow(),
        ]);
        if (opts.json) {
          printJson({
            total: total.n,
            timeouts: rows.map((t) => ({
              timeoutId: t.timeout_id,
              kind: t.kind,
              bizId: t.biz_id,
              dueAt: t.due_at,
              attempts: t.attempts,
              lastError: t.last_error,
              shardId: t.shard_id,
              scanId: t.scan_id,
              failedAt: t.failed_at,
              payload: t.payload,
            })),
          });
          return;
        }
        if (total.n === 0) {
          print('no failed timeouts');
          return;
        }
        print(
          table(rows, [
            { header: 'timeout', value: (t) => t.timeout_id },
            { header: 'kind', value: (t) => t.kind },
            { header: 'biz id', value: (t) => t.biz_id, max: 24 },
            { header: 'due', value: (t) => formatTime(t.due_at) },
            { header: 'attempts', value: (t) => t.attempts },
            { header: 'failed at', value: (t) => formatTime(t.failed_at) },
            { header: 'shard', value: (t) => t.shard_id },
            { header: 'scan', value: (t) => t.scan_id },
            { header: 'error', value: (t) => t.last_error, max: 70 },
          ]),
        );
        print(
          `\n${rows.length < total.n ? `showing ${rows.length} of ${total.n} (use --limit or --json)` : `${total.n} failed`}; retry with: timeout-center retry --id <id> | --kind <kind> | --scan <scanId> | --shard <shardId>`,
        );
      });
    });
}
