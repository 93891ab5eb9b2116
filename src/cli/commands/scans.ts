// `timeout-center scans [--limit n] [--state s]`: the most recent scans (view scan_report), newest
// first, with their totals once reduced. With a config that names stores, the scans of the center
// and of every store (or of --store), each with its store.
import { sql } from 'kysely';
import type { Command } from 'commander';
import { databaseOption, inputError, jsonOption, parseLimit, print, printJson, type DbOptions } from './common.js';
import { acrossStores, eachStore, mergeRows, printUnreachable, storeStates, withStoreOptions } from './across.js';
import { scanJson, scanTable } from './status.js';

const STATES = ['mapping', 'mapped', 'reduced'] as const;

export function registerScans(program: Command): void {
  withStoreOptions(program.command('scans'))
    .description('recent scans (coordinator ticks), newest first: claimed, shards, done / skipped / failed / retried, duration')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .option('--limit <n>', 'how many scans', (v) => parseLimit(v), 20)
    .option('--state <state>', `only scans in this state (${STATES.join(', ')})`)
    .action(async (opts: DbOptions & { json?: boolean; limit: number; state?: string }) => {
      const state = opts.state;
      if (state !== undefined && !(STATES as readonly string[]).includes(state)) {
        throw inputError(`--state must be one of ${STATES.join(', ')}, got "${state}"`);
      }
      await acrossStores(opts, async (a) => {
        const answers = await eachStore(a, (db) =>
          db
            .selectFrom('timeout_center.scan_report')
            .selectAll()
            .select(sql<number | null>`extract(epoch FROM duration)::float8`.as('duration_s'))
            .$if(state !== undefined, (q) => q.where('state', '=', state as (typeof STATES)[number]))
            .orderBy('scan_id', 'desc')
            .limit(opts.limit)
            .execute(),
        );
        // Several stores: newest first by start time (scan ids are per store), then the limit.
        const merged = mergeRows(answers, (x, y) => y.started_at.getTime() - x.started_at.getTime()).slice(0, opts.limit);
        const rows = a.multi ? merged : merged.map(({ store: _store, ...r }) => r);
        if (opts.json) {
          const scans = rows.map((s) => ({
            ...('store' in s ? { store: s.store } : {}),
            ...scanJson(s),
            cutoff: s.cutoff,
            mappedAt: s.mapped_at,
            coordinator: s.coordinator,
            failures: s.failures,
          }));
          printJson(a.multi ? { stores: storeStates(answers), scans } : scans);
          return;
        }
        print(rows.length === 0 ? 'no scans' : scanTable(rows));
        if (a.multi && rows.length > 0) print('\nscan ids are per store: `timeout-center shards <scanId> --store <store>` shows one');
        printUnreachable(answers, 'scans');
      });
    });
}
