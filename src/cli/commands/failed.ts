// `timeout-center failed [--kind k] [--scan id] [--limit n]`: timeouts that gave up after their
// attempts (view failed_timeouts), newest first, with the error. Retry them with `retry`. With a
// config that names stores, the failed timeouts of the center and of every store (or of --store),
// each with its store.
import { sql } from 'kysely';
import type { Command } from 'commander';
import { assertKind, databaseOption, inputError, formatTime, jsonOption, parseId, parseLimit, print, printJson, table, type DbOptions } from './common.js';
import { acrossStores, eachStore, mergeRows, printUnreachable, storeStates, withStoreOptions } from './across.js';

export function registerFailed(program: Command): void {
  withStoreOptions(program.command('failed'))
    .description('failed timeouts (gave up after their attempts), newest first, with their last error; retry them with `retry`')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .option('--kind <kind>', 'only this kind')
    .option('--scan <scanId>', 'only timeouts failed in this scan (scan ids are per store: with stores, give --store)', (v) => parseId(v, '--scan'))
    .option('--limit <n>', 'how many to show', (v) => parseLimit(v), 50)
    .action(async (opts: DbOptions & { json?: boolean; kind?: string; scan?: number; limit: number }) => {
      await acrossStores(opts, async (a) => {
        if (opts.scan !== undefined && a.stores.length > 1) {
          throw inputError(`scan ids are per store: with --scan, pass --store <name> (${a.stores.join(', ')})`);
        }
        const answers = await eachStore(a, async (db) => {
          if (opts.kind !== undefined) await assertKind(db, opts.kind);
          const base = db
            .selectFrom('timeout_center.failed_timeouts')
            .$if(opts.kind !== undefined, (q) => q.where('kind', '=', opts.kind!))
            .$if(opts.scan !== undefined, (q) => q.where('scan_id', '=', opts.scan!));
          const [rows, total] = await Promise.all([
            base.selectAll().orderBy('failed_at', 'desc').orderBy('timeout_id', 'desc').limit(opts.limit).execute(),
            base.select(sql<number>`count(*)::int`.as('n')).executeTakeFirstOrThrow(),
          ]);
          return { rows, total: total.n };
        });
        const total = answers.reduce((n, r) => n + (r.ok ? r.value.total : 0), 0);
        const rows = mergeRows(
          answers.map((r) => (r.ok ? { ...r, value: r.value.rows } : r)),
          (x, y) => (y.failed_at?.getTime() ?? 0) - (x.failed_at?.getTime() ?? 0),
        ).slice(0, opts.limit);
        if (opts.json) {
          const timeouts = rows.map((t) => ({
            ...(a.multi ? { store: t.store } : {}),
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
          }));
          printJson(a.multi ? { total, stores: storeStates(answers), timeouts } : { total, timeouts });
          return;
        }
        if (total === 0) print('no failed timeouts');
        else {
          print(
            table(rows, [
              ...(a.multi ? [{ header: 'store', value: (t: (typeof rows)[number]) => t.store }] : []),
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
          const store = a.multi ? ' --store <store>' : '';
          print(
            `\n${rows.length < total ? `showing ${rows.length} of ${total} (use --limit or --json)` : `${total} failed`}; retry with: timeout-center retry --kind <kind> | --id <id>${store} | --scan <scanId>${store} | --shard <shardId>${store}`,
          );
        }
        printUnreachable(answers, 'failed timeouts');
      });
    });
}
