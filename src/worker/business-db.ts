// Business databases the center does not own: one pool per database (opened on first use), the
// marker table the external path writes there, and the `migrate` step that prepares it.
import type pg from 'pg';
import type { Logger } from 'pino';
import { createClient, createPool } from '../db/pool.js';
import { sql } from '../db/queries.js';

/** A URL for logs and errors: the password hidden. */
export function redactDbUrl(url: string): string {
  // URL userinfo, and password= in the key-value form or a URL parameter.
  return url.replace(/\/\/([^:@/]*):([^@/]*)@/, '//$1:***@').replace(/(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)/gi, '$1***');
}

export interface Marker {
  applied: string[];
  failed: { bizId: string; error: string; permanent: boolean }[];
  /** The biz_ids the run handled (applied, failed or skipped); undefined: a marker written by an
   *  older version, which covers every row its shard holds. */
  ran?: string[] | undefined;
}

export class BusinessDatabases {
  private readonly pools = new Map<string, pg.Pool>();

  constructor(
    private readonly urls: Record<string, string>,
    private readonly poolSizes: Record<string, number>,
    private readonly logger: Logger,
    /** A hung worker's business transaction must not hold the orders' row locks forever. */
    private readonly idleInTransactionTimeoutMs: number,
    /** config databaseSilenceMs (db/silence-watch.ts). */
    private readonly silentAfterMs?: number,
  ) {}

  pool(name: string): pg.Pool {
    let pool = this.pools.get(name);
    if (!pool) {
      const url = this.urls[name];
      if (!url) throw new Error(`business database "${name}" is not declared under businessDatabases`);
      pool = createPool({
        connectionString: url,
        max: this.poolSizes[name] ?? 4,
        applicationName: `timeout-center worker (${name})`,
        logger: this.logger.child({ database: name }),
        idleInTransactionTimeoutMs: this.idleInTransactionTimeoutMs,
        connectionTimeoutMs: 3000,
        silentAfterMs: this.silentAfterMs,
      });
      this.pools.set(name, pool);
    }
    return pool;
  }

  /** Closes every pool; bounded, since pool.end() waits for connections a handler still holds. */
  async close(boundMs = 2000): Promise<void> {
    const ends = Promise.all([...this.pools.values()].map((p) => p.end().catch(() => {})));
    this.pools.clear();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([ends, new Promise<void>((r) => (timer = setTimeout(r, boundMs)))]);
    clearTimeout(timer);
  }
}

/** What a run of this shard left in the target: its marker, the split's tombstone, or nothing. */
export async function readMarker(client: pg.ClientBase, shardId: number): Promise<Marker | 'split' | undefined> {
  const { rows } = await client.query<{
    lease_token: string;
    applied: string[];
    failed_ids: string[];
    failed_errors: string[];
    failed_permanent: boolean[];
    ran: string[] | null;
  }>('SELECT lease_token, applied, failed_ids, failed_errors, failed_permanent, ran FROM timeout_center.markers WHERE shard_id = $1', [shardId]);
  const r = rows[0];
  if (!r) return undefined;
  if (r.lease_token === SPLIT_TOMBSTONE) return 'split';
  return {
    applied: r.applied,
    failed: r.failed_ids.map((bizId, i) => ({ bizId, error: r.failed_errors[i] ?? '', permanent: r.failed_permanent[i] ?? false })),
    ran: r.ran ?? undefined,
  };
}

/**
 * The first statement of a run's transaction in the target, before the handler: the marker's key
 * is the shard's id, so while this run's transaction is open every other run of the shard waits
 * here, and once it committed every other run fails here (23505, markers_pkey) and records what it
 * did instead of applying again. A run that cannot insert never touches the orders.
 */
export async function insertMarker(client: pg.ClientBase, shardId: number, leaseToken: string, ran: string[]): Promise<void> {
  await client.query(sql('worker/marker_insert', { shardId, leaseToken, ran }));
}

/** The run's outcome into its marker, in the same transaction as the handler's effect. */
export async function completeMarker(client: pg.ClientBase, shardId: number, marker: Marker): Promise<void> {
  await client.query(
    sql('worker/marker_complete', {
      shardId,
      applied: marker.applied,
      failedIds: marker.failed.map((f) => f.bizId),
      failedErrors: marker.failed.map((f) => f.error),
      failedPermanent: marker.failed.map((f) => f.permanent),
    }),
  );
}

export function isMarkerConflict(err: unknown): boolean {
  return (err as { code?: string } | undefined)?.code === '23505' && /markers_pkey/.test((err as Error).message);
}

/** The lease token of a split's tombstone marker (external-executor.ts, isolate): no run of a
 *  shard has this token, so it can never be taken for a run's own marker. */
export const SPLIT_TOMBSTONE = '00000000-0000-0000-0000-000000000000';

/**
 * Before a shard's held rows are split into new shards (a re-run after its worker died), fences
 * every other run of the shard out of the target: a tombstone marker (nothing applied) commits
 * under the shard's id, so a run still alive somewhere (a frozen worker) can never commit its
 * effects there afterwards: its own marker insert fails on the key. Returns 'fenced' (the
 * tombstone is in, now or from an earlier try), or 'committed' when a run's marker is there (that
 * run applied: record it, do not split). A run holding an uncommitted marker makes the insert wait;
 * past lock_timeout it throws, and the caller does not split.
 */
export async function fenceForSplit(pool: pg.Pool, shardId: number): Promise<'fenced' | 'committed'> {
  const client = await pool.connect();
  try {
    await client.query(`BEGIN; SET LOCAL lock_timeout = '2s'`);
    const inserted = await client.query(sql('worker/marker_tombstone', { shardId, leaseToken: SPLIT_TOMBSTONE }));
    if (inserted.rowCount === 0) {
      const { rows } = await client.query<{ lease_token: string }>(sql('worker/marker_token', { shardId }));
      await client.query('ROLLBACK');
      return rows[0]?.lease_token === SPLIT_TOMBSTONE ? 'fenced' : 'committed';
    }
    await client.query('COMMIT');
    return 'fenced';
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/** After the center recorded the outcome the marker has done its job. */
export async function deleteMarker(pool: pg.Pool, shardId: number): Promise<void> {
  await pool.query(sql('worker/marker_delete', { shardId }));
}

/** deleteMarker after a run's record, best effort: a marker of a recorded shard is never read
 *  again, so a failure is only logged. */
export async function forgetMarker(pool: pg.Pool, shardId: number, log: Logger): Promise<void> {
  await deleteMarker(pool, shardId).catch((err: unknown) =>
    log.warn({ err }, 'could not delete the marker of a recorded shard (harmless: it is never read again)'),
  );
}

export interface PrepareResult {
  prepared: string[];
  unreachable: { name: string; url: string; error: string }[];
}

/** `migrate`: creates the marker table in every business database it can reach, and names the
 *  ones it could not. */
export async function prepareBusinessDatabases(urls: Record<string, string>, logger: Logger): Promise<PrepareResult> {
  const out: PrepareResult = { prepared: [], unreachable: [] };
  for (const [name, url] of Object.entries(urls)) {
    const client = createClient(url, { connectionTimeoutMillis: 5000, application_name: 'timeout-center migrate' });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query(sql('worker/business_markers'));
      out.prepared.push(name);
      logger.info({ database: name }, 'business database prepared (timeout_center.markers)');
    } catch (err) {
      out.unreachable.push({ name, url: redactDbUrl(url), error: (err as Error).message });
    } finally {
      await client.end().catch(() => {});
    }
  }
  return out;
}
