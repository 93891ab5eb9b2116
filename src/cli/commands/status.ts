// `timeout-center status`: one screen on the health of the center. Backlog and oldest lag per kind
// (view backlog), who leads and with which epoch (coordinator_lease), live workers (workers table:
// seen in the last LIVE_WINDOW_S seconds and not stopped), failed timeouts waiting for an operator,
// the last scans (view scan_report), flow control per kind (view kind_controls: paused, caps,
// rate, who changed them and when) and per business database (view target_controls: its rate
// limit over all kinds).
import { sql } from 'kysely';
import type { Command } from 'commander';
import {
  databaseOption,
  formatSeconds,
  formatTime,
  jsonOption,
  parseLimit,
  print,
  printJson,
  table,
  withDatabase,
  type DbOptions,
  type DbTimestamp,
} from './common.js';
import type { ScanReportView } from '../../db/schema.js';
import { listKindControls } from '../../flow/kind-controls.js';
import { LIVE_WINDOW_S, openBreakers } from '../../operations/overview.js';
import { listTargetControls } from '../../flow/target-controls.js';
import { controlsJson, describeControls, describeTargetControls, targetControlsJson } from './flow.js';
import { Option } from 'commander';
import { loadConfig } from '../../config.js';
import { createLogger } from '../../observability/logger.js';
import { probeRedis, type RedisProbe } from '../../transport/redis-probe.js';
import { storesOverview, type StoreOverview } from '../../operations/stores-overview.js';
import { citusNodes, describeLayout, readLayout } from '../../db/citus-layout.js';
import type pg from 'pg';

export { LIVE_WINDOW_S };

export function registerStatus(program: Command): void {
  program
    .command('status')
    .description(`backlog and oldest lag per kind, leader and epoch, live workers (seen in the last ${LIVE_WINDOW_S} s), failed count, last scans`)
    .addOption(databaseOption())
    .addOption(jsonOption())
    .option('--scans <n>', 'how many recent scans to show', (v) => parseLimit(v, '--scans'), 5)
    .addOption(new Option('--config <file>', 'config file: adds the Redis mode and the node serving each kind').env('TIMEOUT_CENTER_CONFIG'))
    .action(async (opts: DbOptions & { json?: boolean; scans: number; config?: string }) => {
      const redis = opts.config ? redisStatus(opts.config) : Promise.resolve(undefined);
      const stores = opts.config ? storesStatus(opts.config) : Promise.resolve([]);
      await withDatabase(opts, async (db, pool) => {
        const [now, backlog, lease, workers, failed, scans, controls, breakers, targets] = await Promise.all([
          sql<{ now: Date }>`SELECT now() AS now`.execute(db),
          db
            .selectFrom('timeout_center.backlog')
            .select(['kind', 'pending_due', 'in_flight', 'oldest_due_at', 'paused'])
            .select(sql<number | null>`extract(epoch FROM oldest_lag)::float8`.as('oldest_lag_s'))
            .orderBy('kind')
            .execute(),
          db.selectFrom('timeout_center.coordinator_lease').select(['epoch', 'holder', 'acquired_at']).where('id', '=', 1).executeTakeFirst(),
          db
            .selectFrom('timeout_center.workers')
            .select(['worker_id', 'host', 'pid', 'kinds', 'started_at', 'last_seen_at'])
            .select(sql<number>`extract(epoch FROM now() - last_seen_at)::float8`.as('seen_s_ago'))
            .where('stopped_at', 'is', null)
            .where('last_seen_at', '>', sql<DbTimestamp>`now() - make_interval(secs => ${LIVE_WINDOW_S})`)
            .orderBy('worker_id')
            .execute(),
          db
            .selectFrom('timeout_center.timeouts')
            .select(['kind', sql<number>`count(*)::int`.as('count')])
            .where('state', '=', 'failed')
            .groupBy('kind')
            .orderBy('kind')
            .execute(),
          db
            .selectFrom('timeout_center.scan_report')
            .select(['scan_id', 'state', 'claimed', 'shard_count', 'done', 'skipped', 'failed', 'retried', 'started_at', 'reduced_at', 'epoch'])
            .select(sql<number | null>`extract(epoch FROM duration)::float8`.as('duration_s'))
            .orderBy('scan_id', 'desc')
            .limit(opts.scans)
            .execute(),
          listKindControls(pool),
          openBreakers(pool),
          listTargetControls(pool),
        ]);
        // Flow control worth a line: paused, limited, or changed at run time.
        const controlled = controls.filter((c) => c.paused || c.maxRunningShards !== null || c.rateLimit !== null || c.source === 'operator');
        const limitedTargets = targets.filter((t) => t.rateLimit !== null || t.source === 'operator');
        const totals = {
          pendingDue: backlog.reduce((a, b) => a + Number(b.pending_due), 0),
          inFlight: backlog.reduce((a, b) => a + Number(b.in_flight), 0),
          oldestLagSeconds: backlog.reduce<number | null>((a, b) => (b.oldest_lag_s !== null && (a === null || b.oldest_lag_s > a) ? b.oldest_lag_s : a), null),
          failed: failed.reduce((a, b) => a + b.count, 0),
        };
        const leader = lease && lease.epoch > 0 ? { holder: lease.holder, epoch: Number(lease.epoch), acquiredAt: lease.acquired_at } : null;
        // Kinds with work that no live worker serves: their timeouts wait (sql/0013).
        const served = new Set(workers.flatMap((w) => w.kinds));
        const unserved = backlog.filter((b) => !b.paused && !served.has(b.kind) && Number(b.pending_due) + Number(b.in_flight) > 0).map((b) => b.kind);
        const redisProbe = await redis;
        const storeRows = await stores;
        const layout = await layoutStatus(pool);
        if (opts.json) {
          printJson({
            now: now.rows[0]!.now,
            redis: redisProbe ?? null,
            stores: storeRows,
            layout,
            backlog: backlog.map((b) => ({
              kind: b.kind,
              pendingDue: Number(b.pending_due),
              inFlight: Number(b.in_flight),
              oldestDueAt: b.oldest_due_at,
              oldestLagSeconds: b.oldest_lag_s,
              paused: b.paused,
            })),
            kinds: controls.map(controlsJson),
            databases: targets.map(targetControlsJson),
            totals,
            leader,
            liveWorkers: workers.map((w) => ({
              workerId: w.worker_id,
              host: w.host,
              pid: w.pid,
              kinds: w.kinds,
              startedAt: w.started_at,
              lastSeenAt: w.last_seen_at,
            })),
            unservedKinds: unserved,
            failed: Object.fromEntries(failed.map((f) => [f.kind, f.count])),
            scans: scans.map(scanJson),
            openBreakers: breakers.map((b) => ({
              kind: b.kind,
              target: b.target,
              worker: b.worker,
              state: b.state,
              since: b.changedAt,
              lastError: b.lastError,
            })),
          });
          return;
        }
        const out: string[] = [];
        out.push(`Backlog: ${totals.pendingDue} due and waiting, ${totals.inFlight} in flight, oldest lag ${formatSeconds(totals.oldestLagSeconds) ?? '-'}`);
        if (backlog.length > 0) {
          out.push(
            indent(
              table(backlog, [
                { header: 'kind', value: (b) => b.kind },
                { header: 'due waiting', value: (b) => Number(b.pending_due) },
                { header: 'in flight', value: (b) => Number(b.in_flight) },
                { header: 'oldest lag', value: (b) => formatSeconds(b.oldest_lag_s), align: 'right' },
                { header: 'flow', value: (b) => (b.paused ? 'PAUSED' : unserved.includes(b.kind) ? 'NO WORKER' : null) },
              ]),
            ),
          );
        }
        out.push('');
        if (controlled.length === 0 && limitedTargets.length === 0) out.push('Flow control: no kind paused or limited');
        else out.push(`Flow control:\n${indent([...controlled.map(describeControls), ...limitedTargets.map(describeTargetControls)].join('\n'))}`);
        out.push('');
        out.push(
          leader
            ? `Leader: ${leader.holder ?? '?'} (epoch ${leader.epoch}, since ${formatTime(leader.acquiredAt)}; each coordinator's /readyz says whether it leads now)`
            : 'Leader: none has been elected yet (no coordinator has run against this database)',
        );
        out.push('');
        out.push(`Layout: ${layout.description}`);
        out.push('');
        out.push(describeRedis(redisProbe));
        out.push('');
        if (storeRows.length > 0) {
          out.push(describeStores(storeRows));
          out.push('');
        }
        out.push(`Live workers: ${workers.length}`);
        if (unserved.length > 0) {
          out.push(
            `  No live worker serves ${unserved.join(', ')}: its timeouts wait (one shard at most) while the other kinds go on. Start a worker with it in worker.kinds, or pause it.`,
          );
        }
        if (workers.length > 0) {
          out.push(
            indent(
              table(workers, [
                { header: 'worker', value: (w) => w.worker_id },
                { header: 'host', value: (w) => w.host },
                { header: 'pid', value: (w) => w.pid },
                { header: 'kinds', value: (w) => w.kinds.join(','), max: 40 },
                { header: 'last seen', value: (w) => `${formatSeconds(w.seen_s_ago)} ago`, align: 'right' },
              ]),
            ),
          );
        }
        out.push('');
        out.push(
          totals.failed > 0
            ? `Failed timeouts: ${totals.failed} (${failed.map((f) => `${f.kind} ${f.count}`).join(', ')}): see \`timeout-center failed\`, then \`timeout-center retry\``
            : 'Failed timeouts: 0',
        );
        out.push('');
        out.push(`Circuit breakers not closed: ${breakers.length}`);
        if (breakers.length > 0) {
          out.push(
            indent(
              table(breakers, [
                { header: 'kind', value: (b) => b.kind },
                { header: 'target', value: (b) => b.target },
                { header: 'worker', value: (b) => b.worker },
                { header: 'state', value: (b) => b.state },
                { header: 'for', value: (b) => formatSeconds(b.forSeconds), align: 'right' },
                { header: 'last error', value: (b) => b.lastError ?? '', max: 60 },
              ]),
            ),
          );
        }
        out.push('');
        out.push(`Last scans: ${scans.length === 0 ? 'none yet' : ''}`.trimEnd());
        if (scans.length > 0) out.push(indent(scanTable(scans)));
        print(out.join('\n'));
      });
    });
}

/** The Redis the config names, probed; a config that does not load is reported, not fatal. */
async function redisStatus(path: string): Promise<RedisProbe | { error: string }> {
  try {
    const config = loadConfig({ path });
    return await probeRedis(config.redisConnection, config.redisKeyPrefix, Object.keys(config.kinds), createLogger('silent'));
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** The stores the config names, each read on its own; a config that does not load gives none. */
async function storesStatus(path: string): Promise<StoreOverview[]> {
  try {
    return await storesOverview(loadConfig({ path, needsRedis: false }));
  } catch {
    return [];
  }
}

function describeStores(rows: StoreOverview[]): string {
  const down = rows.filter((r) => !r.reachable);
  const head = `Stores (kinds stored beside their orders; the center's own kinds are above): ${rows.length}${down.length ? `, ${down.length} UNREACHABLE` : ''}`;
  return [
    head,
    indent(
      table(rows, [
        { header: 'store', value: (r) => r.store },
        { header: 'due waiting', value: (r) => (r.reachable ? r.pendingDue! : 'UNREACHABLE') },
        { header: 'in flight', value: (r) => (r.reachable ? r.inFlight! : null) },
        { header: 'oldest lag', value: (r) => (r.reachable ? formatSeconds(r.oldestLagSeconds ?? null) : null), align: 'right' },
        { header: 'failed', value: (r) => (r.reachable ? r.failed! : null) },
        { header: 'leader', value: (r) => (r.reachable ? (r.leader ? `${r.leader.holder ?? '?'} (epoch ${r.leader.epoch})` : 'none yet') : null) },
        { header: 'live workers', value: (r) => (r.reachable ? r.liveWorkers! : null) },
        { header: 'error', value: (r) => r.error ?? null, max: 80 },
      ]),
    ),
    ...(down.length
      ? [`  ${down.map((d) => d.store).join(', ')}: its timeouts wait until it answers; the other stores go on. Start it, or check businessDatabases.`]
      : []),
  ].join('\n');
}

function describeRedis(probe: RedisProbe | { error: string } | undefined): string {
  if (!probe) return 'Redis: not checked (pass --config <file> or set TIMEOUT_CENTER_CONFIG)';
  if (!('mode' in probe)) return `Redis: config not loaded: ${probe.error}`;
  const head = `Redis: ${probe.mode}, ${probe.target}`;
  if (probe.error) return `${head}: UNREACHABLE (${probe.error})`;
  const streams = probe.streams.map((s) => `  ${s.kind}: ${s.key} on ${s.node}${s.slot === undefined ? '' : ` (slot ${s.slot})`}`);
  return [`${head}, reaching ${probe.nodes.join(', ')}`, ...streams].join('\n');
}

function indent(text: string): string {
  return text
    .split('\n')
    .map((l) => `  ${l}`)
    .join('\n');
}

/** The scan_report columns the status and scans verbs show, plus the duration in seconds. */
export type ScanRow = Pick<
  ScanReportView,
  'scan_id' | 'state' | 'claimed' | 'shard_count' | 'done' | 'skipped' | 'failed' | 'retried' | 'started_at' | 'reduced_at' | 'epoch'
> & { duration_s: number | null };

/** A scan as --json prints it (status and scans). */
export function scanJson(s: ScanRow) {
  return {
    scanId: s.scan_id,
    state: s.state,
    claimed: s.claimed,
    shards: s.shard_count,
    done: s.done,
    skipped: s.skipped,
    failed: s.failed,
    retried: s.retried,
    startedAt: s.started_at,
    reducedAt: s.reduced_at,
    durationSeconds: s.duration_s,
    epoch: Number(s.epoch),
  };
}

/** The scans as a table; with a `store` on each row (several stores read), a STORE column first. */
export function scanTable(scans: (ScanRow & { store?: string })[]): string {
  const storeColumn = scans.some((s) => s.store !== undefined) ? [{ header: 'store', value: (s: ScanRow & { store?: string }) => s.store }] : [];
  return table(scans, [
    ...storeColumn,
    { header: 'scan', value: (s) => s.scan_id },
    { header: 'state', value: (s) => s.state },
    { header: 'claimed', value: (s) => s.claimed },
    { header: 'shards', value: (s) => s.shard_count },
    { header: 'done', value: (s) => s.done },
    { header: 'skipped', value: (s) => s.skipped },
    { header: 'failed', value: (s) => s.failed },
    { header: 'retried', value: (s) => s.retried },
    { header: 'started', value: (s) => formatTime(s.started_at) },
    { header: 'duration', value: (s) => formatSeconds(s.duration_s), align: 'right' },
    { header: 'epoch', value: (s) => Number(s.epoch) },
  ]);
}

/** The database's layout (src/db/citus-layout.ts): plain, or citus with its buckets, its worker
 *  nodes and how many of timeouts' shards each holds. */
async function layoutStatus(
  pool: pg.Pool,
): Promise<{ name: string; description: string; buckets?: number; workerNodes?: number; placements?: Record<string, number> }> {
  const layout = await readLayout(pool);
  if (layout.name === 'plain') return { name: layout.name, description: describeLayout(layout) };
  const nodes = await citusNodes(pool);
  const where = Object.entries(nodes.placements)
    .map(([node, n]) => `${node} ${n}`)
    .join(', ');
  return {
    name: layout.name,
    description: `${describeLayout(layout, nodes)}; timeouts' shards per node: ${where}`,
    buckets: layout.buckets.length,
    workerNodes: nodes.workers,
    placements: nodes.placements,
  };
}
