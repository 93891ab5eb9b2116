// `timeout-center shards <scanId> [--state s]`: the shards of one scan (view shard_report): kind,
// size, state, attempts, owner, counts, duration and the first error.
import { sql } from 'kysely';
import type { Command } from 'commander';
import type { Kysely } from 'kysely';
import type { Database } from '../../db/schema.js';
import {
  databaseOption,
  formatSeconds,
  inputError,
  jsonOption,
  parseId,
  print,
  printJson,
  table,
  unavailableError,
  withDatabase,
  type DbOptions,
} from './common.js';
import { UnreachableError } from '../../db/reachability.js';
import { CENTER } from '../../stores/store-directory.js';
import { acrossStores, withStoreOptions } from './across.js';

const STATES = ['queued', 'running', 'done', 'failed'] as const;

export function registerShards(program: Command): void {
  withStoreOptions(program.command('shards'))
    .description('the shards of one scan: kind, size, state, attempts, owner, done / skipped / failed / retried, duration, first error')
    .argument('<scanId>', 'scan id (see `timeout-center scans`)')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .option('--state <state>', `only shards in this state (${STATES.join(', ')})`)
    .action(async (scanArg: string, opts: DbOptions & { json?: boolean; state?: string }) => {
      const scanId = parseId(scanArg, 'scanId');
      const state = opts.state;
      if (state !== undefined && !(STATES as readonly string[]).includes(state)) {
        throw inputError(`--state must be one of ${STATES.join(', ')}, got "${state}"`);
      }
      await acrossStores(opts, async (a) => {
        if (a.stores.length > 1) {
          throw inputError(`scan ids are per store: pass --store <name> (${a.stores.join(', ')}), as \`timeout-center scans\` shows it`);
        }
        const store = a.multi ? a.stores[0] : undefined;
        await withDatabase({ databaseUrl: a.directory.database(a.stores[0]!).url }, (db) => showShards(db, store)).catch((err: unknown) => {
          // A store that does not answer is named as such (the message of withDatabase speaks of DATABASE_URL).
          if (store === undefined || store === CENTER || !(err instanceof UnreachableError)) throw err;
          throw unavailableError(
            `store ${store} does not answer: ${err.message.replace(/ Is the server running.*$/, '')}. Start it, or check businessDatabases.${store}`,
          );
        });
      });
      async function showShards(db: Kysely<Database>, store: string | undefined): Promise<void> {
        const scan = await db.selectFrom('timeout_center.scans').select('id').where('id', '=', scanId).executeTakeFirst();
        if (!scan) throw inputError(`scan ${scanId} does not exist (never created, or purged by retention); see \`timeout-center scans\``);
        const rows = await db
          .selectFrom('timeout_center.shard_report')
          .selectAll()
          .select(sql<number | null>`extract(epoch FROM duration)::float8`.as('duration_s'))
          .where('scan_id', '=', scanId)
          .$if(state !== undefined, (q) => q.where('state', '=', state as (typeof STATES)[number]))
          .orderBy('shard_id')
          .execute();
        if (opts.json) {
          printJson(
            rows.map((s) => ({
              ...(store !== undefined ? { store } : {}),
              shardId: s.shard_id,
              scanId: s.scan_id,
              kind: s.kind,
              target: s.target,
              size: s.size,
              state: s.state,
              attempts: s.attempts,
              owner: s.owner,
              leaseExpiresAt: s.lease_expires_at,
              done: s.done,
              skipped: s.skipped,
              failed: s.failed,
              retried: s.retried,
              errorSample: s.error_sample,
              createdAt: s.created_at,
              startedAt: s.started_at,
              finishedAt: s.finished_at,
              durationSeconds: s.duration_s,
              publishCount: s.publish_count,
            })),
          );
          return;
        }
        if (rows.length === 0) {
          print(`scan ${scanId}${store !== undefined ? ` of store ${store}` : ''} has no shards${state ? ` in state ${state}` : ''}`);
          return;
        }
        if (store !== undefined) print(`store ${store}, scan ${scanId}:`);
        print(
          table(rows, [
            { header: 'shard', value: (s) => s.shard_id },
            { header: 'kind', value: (s) => s.kind },
            ...(rows.some((s) => s.target !== null) ? [{ header: 'target', value: (s: (typeof rows)[number]) => s.target }] : []),
            { header: 'size', value: (s) => s.size },
            { header: 'state', value: (s) => s.state },
            { header: 'attempts', value: (s) => s.attempts },
            { header: 'owner', value: (s) => s.owner, max: 30 },
            { header: 'done', value: (s) => s.done },
            { header: 'skipped', value: (s) => s.skipped },
            { header: 'failed', value: (s) => s.failed },
            { header: 'retried', value: (s) => s.retried },
            { header: 'duration', value: (s) => formatSeconds(s.duration_s), align: 'right' },
            { header: 'error', value: (s) => s.error_sample, max: 60 },
          ]),
        );
      }
    });
}
