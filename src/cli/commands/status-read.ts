// What `timeout-center status` reads: every database of the fleet (the center and, with a config,
// every store), each on its own and in parallel, and what is wrong with it. A database that does
// not answer, is not migrated, or whose URL variable is unset is an answer too (with why), so the
// rest of the fleet is still shown. The rendering is status.ts's list of sections.
import { reachedHost } from '../../db/reached-hosts.js';
import type pg from 'pg';
import semver from 'semver';
import { PRE_RELEASE_CODE } from '../../db/migrations.js';
import { describeProcess, readRelease, type ReleaseStatus } from '../../release/fleet.js';
import { citusNodes, describeLayout, readLayout } from '../../db/citus-layout.js';
import { sql, type Kysely } from 'kysely';
import type { LoadedConfig } from '../../config.js';
import type { Database, DbTimestamp, ScanReportView } from '../../db/schema.js';
import { listKindControls, type KindControls } from '../../flow/kind-controls.js';
import { listTargetControls, type TargetControls } from '../../flow/target-controls.js';
import { createLogger } from '../../observability/logger.js';
import { LIVE_WINDOW_S, openBreakers, type OpenBreaker } from '../../operations/overview.js';
import { readStranded, STRANDED_ADVICE, type Stranded } from '../../operations/stranded.js';
import { CENTER, StoreDirectory, type PerStore, type StoreDatabase } from '../../stores/store-directory.js';
import type { RedisProbe } from '../../transport/redis-probe.js';
import { createPool } from '../../db/pool.js';
import { redactDbUrl } from '../../worker/business-db.js';
import { storeLayout } from '../../stores/layout.js';
import {
  blindMessage,
  HORIZON_DEFAULTS,
  horizonLimits,
  horizonMessage,
  horizonSeverity,
  readHorizon,
  type HorizonLimits,
  type HorizonReading,
} from '../../operations/vacuum-horizon.js';

/** The scan_report columns the status and scans verbs show, plus the duration in seconds. */
export type ScanRow = Pick<
  ScanReportView,
  'scan_id' | 'state' | 'claimed' | 'shard_count' | 'done' | 'skipped' | 'failed' | 'retried' | 'started_at' | 'reduced_at' | 'epoch'
> & { duration_s: number | null };

export interface BacklogRow {
  kind: string;
  pendingDue: number;
  inFlight: number;
  oldestDueAt: Date | null;
  oldestLagSeconds: number | null;
  paused: boolean;
}

export interface WorkerRow {
  workerId: string;
  host: string;
  pid: number;
  kinds: string[];
  startedAt: DbTimestamp;
  lastSeenAt: DbTimestamp;
  seenSecondsAgo: number;
}

/** One database's figures (the center's or a store's). */
export interface DatabaseFigures {
  now: Date;
  backlog: BacklogRow[];
  failed: { kind: string; count: number }[];
  leader: { holder: string | null; epoch: number; acquiredAt: Date | null } | null;
  workers: WorkerRow[];
  scans: ScanRow[];
  breakers: OpenBreaker[];
  /** Timeouts dispatched to a finished shard, per kind: no run will apply them (stranded.sql). */
  stranded: Stranded[];
  /** The host this read reached and the hosts its connection string names (a multi-host string:
   *  the primary now; db/reached-hosts.ts). */
  postgres: { host: string | null; target: string } | null;
  /** The center only: flow control per kind and per business database. */
  controls?: KindControls[];
  targets?: TargetControls[];
  /** The database's layout (src/db/citus-layout.ts): plain, or Citus with its worker nodes. */
  layout?: LayoutStatus;
  /** What holds back VACUUM there (operations/vacuum-horizon.ts). */
  horizon: HorizonReading;
  /** The schema contract and the live processes with their versions (src/release/). */
  release?: ReleaseStatus;
}

export interface LayoutStatus {
  name: string;
  description: string;
  buckets?: number;
  workerNodes?: number;
  placements?: Record<string, number>;
}

/** plain, or citus with its buckets, worker nodes and timeouts' shards per node. */
async function layoutStatus(pool: pg.Pool): Promise<LayoutStatus> {
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

export type DatabaseAnswer = PerStore<DatabaseFigures> & { kinds: string[] | undefined };

/** Something an operator should act on; status names each one and exits 1. */
export interface Problem {
  /** `center`, a store, or undefined for the fleet (Redis). */
  store?: string;
  topic: 'unreachable' | 'unset' | 'redis' | 'no-worker' | 'lag' | 'no-leader' | 'breaker' | 'version' | 'vacuum-horizon' | 'stranded';
  message: string;
}

export interface Fleet {
  /** True when the config names stores: rows name their database. */
  multi: boolean;
  databases: DatabaseAnswer[];
  redis: RedisProbe | { error: string } | undefined;
  /** Kinds with work that no live worker of their database serves, per database. */
  unserved: { store: string; kind: string }[];
  lagSlaSeconds: number;
  /** When a vacuum horizon holder is a problem (alerts.vacuumHorizonMs / Xids of the config). */
  horizonLimits: HorizonLimits;
  /** The vacuum horizon of each business database that is not a store (those hold no center
   *  schema: only their horizon is read), or why it could not be read. */
  businessHorizons: PerStore<HorizonReading>[];
  /** How many recent scans to show (--scans). */
  scanLimit: number;
  problems: Problem[];
}

async function readDatabase(d: StoreDatabase, scans: number): Promise<DatabaseFigures> {
  const db: Kysely<Database> = d.db;
  const center = d.store === CENTER;
  const [now, backlog, lease, workers, failed, scanRows, breakers, controls, targets, layout, horizon, release, stranded] = await Promise.all([
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
      .limit(scans)
      .execute(),
    openBreakers(d.pool),
    center ? listKindControls(d.pool) : Promise.resolve(undefined),
    center ? listTargetControls(d.pool) : Promise.resolve(undefined),
    layoutStatus(d.pool),
    readHorizon(d.pool),
    readRelease(d.pool),
    readStranded(d.pool),
  ]);
  const reached = reachedHost(d.pool);
  return {
    layout,
    horizon,
    now: now.rows[0]!.now,
    backlog: backlog.map((b) => ({
      kind: b.kind,
      pendingDue: Number(b.pending_due),
      inFlight: Number(b.in_flight),
      oldestDueAt: b.oldest_due_at,
      oldestLagSeconds: b.oldest_lag_s,
      paused: b.paused,
    })),
    failed,
    leader: lease && Number(lease.epoch) > 0 ? { holder: lease.holder, epoch: Number(lease.epoch), acquiredAt: lease.acquired_at } : null,
    workers: workers.map((w) => ({
      workerId: w.worker_id,
      host: w.host,
      pid: w.pid,
      kinds: w.kinds,
      startedAt: w.started_at,
      lastSeenAt: w.last_seen_at,
      seenSecondsAgo: w.seen_s_ago,
    })),
    scans: scanRows,
    breakers,
    stranded,
    postgres: reached ? { host: reached.host ?? null, target: reached.target } : null,
    ...(controls ? { controls } : {}),
    ...(targets ? { targets } : {}),
    release,
  };
}

/** The Redis the config names, probed; not checked without a config or a Redis setting. */
async function redisStatus(config: LoadedConfig | undefined): Promise<Fleet['redis']> {
  if (!config) return undefined;
  if (config.redisConnection.mode === 'single' && !config.redisConnection.url)
    return { error: 'not set: set REDIS_URL (or redisUrl / redis in the config) to check it' };
  try {
    const { probeRedis } = await import('../../transport/redis-probe.js');
    return await probeRedis(config.redisConnection, config.redisKeyPrefix, Object.keys(config.kinds), createLogger('silent'));
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** The vacuum horizon of each business database of the config that is not a store. */
async function businessHorizons(config: LoadedConfig | undefined): Promise<PerStore<HorizonReading>[]> {
  if (!config) return [];
  const stores = storeLayout(config.kinds);
  const names = Object.keys(config.businessDatabaseUrls).filter((n) => !stores.has(n));
  return Promise.all(
    names.map(async (name): Promise<PerStore<HorizonReading>> => {
      const url = config.businessDatabaseUrls[name]!;
      const pool = createPool({
        connectionString: url,
        max: 1,
        applicationName: 'timeout-center status',
        logger: createLogger('silent'),
        connectionTimeoutMs: 3000,
        statementTimeoutMs: 10_000,
      });
      try {
        return { store: name, ok: true, value: await readHorizon(pool) };
      } catch (err) {
        return { store: name, ok: false, error: `${redactDbUrl(url)}: ${(err as Error).message}` };
      } finally {
        await pool.end().catch(() => {});
      }
    }),
  );
}

/** Reads the whole fleet: the center and every store of the config, and Redis. */
export async function readFleet(input: { centerUrl: string; config: LoadedConfig | undefined; scans: number }): Promise<Fleet> {
  const o = {
    centerUrl: input.centerUrl,
    logger: createLogger('silent'),
    applicationName: 'timeout-center status',
    connectTimeoutMs: 3000,
    statementTimeoutMs: 10_000,
  };
  const directory = input.config ? StoreDirectory.fromConfig(input.config, o) : new StoreDirectory(o);
  try {
    const [answers, redis, business] = await Promise.all([
      directory.each(directory.names, (d) => readDatabase(d, input.scans)),
      redisStatus(input.config),
      businessHorizons(input.config),
    ]);
    const databases = answers.map((a) => ({ ...a, kinds: a.store === CENTER ? undefined : directory.kindsOf(a.store) }));
    const lagSlaSeconds = (input.config?.alerts.lagSlaMs ?? 60_000) / 1000;
    const unserved = databases.flatMap((d) => {
      if (!d.ok) return [];
      const served = new Set(d.value.workers.flatMap((w) => w.kinds));
      return d.value.backlog.filter((b) => !b.paused && !served.has(b.kind) && b.pendingDue + b.inFlight > 0).map((b) => ({ store: d.store, kind: b.kind }));
    });
    const fleet: Fleet = {
      multi: directory.hasStores,
      databases,
      redis,
      unserved,
      lagSlaSeconds,
      horizonLimits: input.config ? horizonLimits(input.config.alerts) : HORIZON_DEFAULTS,
      businessHorizons: business,
      scanLimit: input.scans,
      problems: [],
    };
    fleet.problems = problemsOf(fleet);
    return fleet;
  } finally {
    await directory.close();
  }
}

function where(fleet: Fleet, store: string): string {
  return fleet.multi ? (store === CENTER ? 'the center' : `store ${store}`) : 'the center';
}

/** What is wrong, each with what to do. Failed timeouts are not a problem here: they wait for
 *  `retry`, and the fleet runs (they are shown in their own section). */
export function problemsOf(fleet: Fleet): Problem[] {
  const out: Problem[] = [];
  for (const d of fleet.databases) {
    if (!d.ok) {
      if (d.unsetVariable) out.push({ store: d.store, topic: 'unset', message: `store ${d.store}: NOT SET: ${d.error}` });
      else {
        out.push({
          store: d.store,
          topic: 'unreachable',
          message: `${where(fleet, d.store)}: UNREACHABLE (${d.error}): its timeouts wait until it answers${fleet.multi ? '; the other databases go on' : ''}. Start it, or check ${d.store === CENTER ? 'DATABASE_URL' : `businessDatabases.${d.store}`}`,
        });
      }
      continue;
    }
    const f = d.value;
    const due = f.backlog.reduce((n, b) => n + b.pendingDue + b.inFlight, 0);
    if (!f.leader && due > 0) {
      out.push({
        store: d.store,
        topic: 'no-leader',
        message: `${where(fleet, d.store)}: ${due} timeouts due and no coordinator has ever led it: start a coordinator with this config (timeout-center coordinator)`,
      });
    }
    for (const b of f.backlog) {
      if (!b.paused && b.oldestLagSeconds !== null && b.oldestLagSeconds > fleet.lagSlaSeconds) {
        out.push({
          store: d.store,
          topic: 'lag',
          message: `${where(fleet, d.store)}: ${b.kind} is late: its oldest due timeout waits ${Math.round(b.oldestLagSeconds)} s (SLA ${fleet.lagSlaSeconds} s); check its leader and workers below`,
        });
      }
    }
    const contract = f.release?.contract;
    if (contract) {
      for (const p of f.release?.processes ?? []) {
        if (semver.lt(p.version ?? PRE_RELEASE_CODE, contract.oldestCode)) {
          out.push({
            store: d.store,
            topic: 'version',
            message: `${where(fleet, d.store)}: ${describeProcess(p)} is older than the schema allows (timeout-center ${contract.oldestCode} or newer): upgrade or stop it`,
          });
        }
      }
    }
    for (const st of f.stranded) {
      out.push({
        store: d.store,
        topic: 'stranded',
        message: `${where(fleet, d.store)}: ${st.count} ${st.kind} timeouts ${STRANDED_ADVICE}`,
      });
    }
    for (const b of f.breakers) {
      out.push({
        store: d.store,
        topic: 'breaker',
        message: `circuit ${b.state} for ${b.kind} against ${b.target} (worker ${b.worker}): ${b.lastError ?? 'no error recorded'}; its shards are given back until ${b.target} answers`,
      });
    }
  }
  for (const [database, horizon] of horizonsOf(fleet)) {
    for (const h of horizon.holders) {
      if (horizonSeverity(h, fleet.horizonLimits)) out.push({ store: database, topic: 'vacuum-horizon', message: horizonMessage(database, h) });
    }
  }
  for (const u of fleet.unserved) {
    out.push({
      store: u.store,
      topic: 'no-worker',
      message: `${where(fleet, u.store)}: no live worker serves ${u.kind}: its timeouts wait. Start a worker with it in worker.kinds, or pause it`,
    });
  }
  if (fleet.redis && 'mode' in fleet.redis && fleet.redis.error) {
    out.push({
      topic: 'redis',
      message: `Redis: UNREACHABLE (${fleet.redis.error}): no shard moves until it answers. Start it, or check REDIS_URL / the config's redis`,
    });
  }
  return out;
}

/** Every vacuum horizon read: the center's, each store's, each other business database's. */
export function horizonsOf(fleet: Fleet): [string, HorizonReading][] {
  return [
    ...fleet.databases.flatMap((d): [string, HorizonReading][] => (d.ok ? [[d.store, d.value.horizon]] : [])),
    ...fleet.businessHorizons.flatMap((b): [string, HorizonReading][] => (b.ok ? [[b.store, b.value]] : [])),
  ];
}

/** The notes of databases where the role cannot see other roles' sessions. */
export function blindNotes(fleet: Fleet): string[] {
  return horizonsOf(fleet)
    .filter(([, h]) => !h.seesAllSessions)
    .map(([database, h]) => blindMessage(database, h));
}
