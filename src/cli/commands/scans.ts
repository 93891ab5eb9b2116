// `timeout-center scans [--limit n] [--state s]`: the most recent scans (view scan_report), newest
// first, with their totals once reduced.
import { sql } from 'kysely';
import type { Command } from 'commander';
import { databaseOption, inputError, jsonOption, parseLimit, print, printJson, withDatabase, type DbOptions, withStoreOptions } from './common.js';
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
      await withDatabase(opts, async (db) => {
        const rows = await db
          .selectFrom('timeout_center.scan_report')
          .selectAll()
          .select(sql<number | null>`extract(epoch FROM duration)::float8`.as('duration_s'))
          .$if(state !== undefined, (q) => q.where('state', '=', state as (typeof STATES)[number]))
          .orderBy('scan_id', 'desc')
          .limit(opts.limit)
          .execute();
        if (opts.json) {
          printJson(
            rows.map((s) => ({
              ...scanJson(s),
              cutoff: s.cutoff,
              mappedAt: s.mapped_at,
              coordinator: s.coordinator,
              failures: s.failures,
            })),
          );
          return;
        }
        print(rows.length === 0 ? 'no scans' : scanTable(rows));
      });
    });
}
