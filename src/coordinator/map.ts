// Map: count what is due beyond the shards already in flight and write a scan with new shards for
// it, in one fenced statement. The timeouts themselves are not touched here: each shard carries a
// claim limit, and the worker that runs it claims that many due rows of its kind (see
// worker/queries/claim.sql), so every timeout is written once on its way to done.
import type pg from 'pg';
import { sql, type BoundStatement } from '../db/queries.js';
import { layoutOf } from '../db/citus-layout.js';
import type { ShardMessage } from '../transport/channel.js';
import type { ClaimFloors } from './claim-floors.js';
import { fencedTransaction } from './fence.js';

export interface PlannedScan {
  scanId: number;
  shards: ShardMessage[];
  /** Due timeouts the new shards may claim in all. */
  capacity: number;
  /** Per kind that got shards: its uncovered rows, what the new shards cover, whether the rows
   *  were counted now (or taken from the credit), and whether that count saw the last due row. */
  byKind: Map<string, { uncovered: number; planned: number; counted: boolean; complete: boolean }>;
  /** Per business database that got shards: what the new shards cover (for its rate budget). */
  byTarget: Map<string, number>;
}

/** Writes a scan with up to maxShards new shards for the due timeouts not yet covered by shards
 *  in flight. Returns undefined (and writes nothing) when nothing new is due. */
export async function planScan(
  pool: pg.Pool,
  epoch: number,
  args: {
    coordinatorId: string;
    cutoff: Date;
    kinds: string[];
    maxShards: number;
    maxRows: number;
    /** Per kind: [uncovered rows counted earlier, whether that count saw the last due row]. */
    credit: Record<string, [number, boolean]>;
    /** Per rate-limited kind: timeouts its token bucket allows now (src/flow/rate-budget.ts). */
    rateBudget: Record<string, number>;
    /** Per rate-limited business database (target): timeouts its token bucket allows now. */
    targetBudget: Record<string, number>;
    /** A plan written ahead of its rows' due instant (from a count ahead): its shards are claimed
     *  no earlier than this time on the database clock (shards.not_before, sql/0011). */
    notBefore?: Date;
    /** A shard running under a worker gone this long covers nothing (worker.goneAfterMs). */
    goneAfterMs: number;
    /** Claim floors, {"kind": [available_at, id]} as JSON (claim-floors.ts; not read on the
     *  Citus layout). None: every count reads the due index from its start. */
    floors?: string;
    /** The oldest shard id in flight (claim-floors.ts; 0: from the first). */
    shardsFrom?: number;
  },
): Promise<PlannedScan | undefined> {
  type Row = {
    id: number;
    scan_id: number;
    kind: string;
    target: string | null;
    bucket?: number | null;
    claim_limit: number;
    uncovered: string;
    counted: boolean;
    complete: boolean;
  };
  // The Citus layout plans per (kind, bucket): same inputs, one uncovered count per bucket.
  const citus = (await layoutOf(pool)).name === 'citus';
  const { rows } = await fencedTransaction(pool, epoch, (client) =>
    client.query<Row>(
      sql(citus ? 'citus/coordinator/plan_shards' : 'coordinator/plan_shards', {
        cutoff: args.cutoff,
        kinds: args.kinds,
        maxShards: args.maxShards,
        maxRows: args.maxRows,
        epoch,
        coordinatorId: args.coordinatorId,
        credit: JSON.stringify(args.credit),
        rateBudget: JSON.stringify(args.rateBudget),
        targetBudget: JSON.stringify(args.targetBudget),
        notBefore: args.notBefore ?? null,
        goneAfterMs: args.goneAfterMs,
        ...(citus ? {} : { floors: args.floors ?? '{}', shardsFrom: args.shardsFrom ?? 0 }),
      }),
    ),
  );
  if (rows.length === 0) return undefined;
  const scanId = Number(rows[0]!.scan_id);
  const byKind = new Map<string, { uncovered: number; planned: number; counted: boolean; complete: boolean }>();
  // A kind routed over several business databases has one uncovered count per target.
  const targetsSeen = new Set<string>();
  for (const r of rows) {
    const k = byKind.get(r.kind) ?? { uncovered: 0, planned: 0, counted: r.counted, complete: r.complete };
    const key = `${r.kind}\u0000${r.target ?? ''}\u0000${r.bucket ?? ''}`;
    if (!targetsSeen.has(key)) {
      targetsSeen.add(key);
      k.uncovered += Number(r.uncovered);
    }
    k.planned += r.claim_limit;
    byKind.set(r.kind, k);
  }
  const byTarget = new Map<string, number>();
  for (const r of rows) if (r.target !== null) byTarget.set(r.target, (byTarget.get(r.target) ?? 0) + r.claim_limit);
  return {
    scanId,
    shards: rows.map((r) => ({ shardId: Number(r.id), scanId, kind: r.kind })),
    capacity: rows.reduce((n, r) => n + r.claim_limit, 0),
    byKind,
    byTarget,
  };
}

/** Counts, before a due instant, what will be due at it beyond the shards in flight, for the kinds
 *  a plan sizes to the backlog (count_ahead.sql): the plan at the instant then writes its shards
 *  from this count instead of counting the flood while the first shards wait. */
export async function countAhead(
  pool: pg.Pool,
  args: { kinds: string[]; cutoff: Date; maxRows: number; floors?: string; shardsFrom?: number },
): Promise<Map<string, { uncovered: number; complete: boolean }>> {
  const { kinds, cutoff, maxRows, floors = '{}', shardsFrom = 0 } = args;
  const { rows } = await pool.query<{ kind: string; uncovered: string; complete: boolean }>(
    (await layoutOf(pool)).name === 'citus'
      ? sql('citus/coordinator/count_ahead', { kinds, cutoff, maxRows })
      : sql('coordinator/count_ahead', { kinds, cutoff, maxRows, floors, shardsFrom }),
  );
  return new Map(rows.map((r) => [r.kind, { uncovered: Number(r.uncovered), complete: r.complete }]));
}

/** next_due.sql; on the Citus layout its per-kind probes first (citus/due_probe.sql, one per kind,
 *  side by side), then its Citus form with what they found. */
export async function nextDueStatement(pool: pg.Pool, kinds: string[], floors: ClaimFloors): Promise<BoundStatement> {
  if ((await layoutOf(pool)).name !== 'citus') return sql('coordinator/next_due', { kinds, ...floors.inputs() });
  const found = await Promise.all(
    kinds.map(async (kind) => {
      const { rows } = await pool.query<{ latest: Date | null; next_after: Date | null }>(sql('citus/coordinator/due_probe', { kind }));
      return [kind, [rows[0]?.latest ?? null, rows[0]?.next_after ?? null]] as const;
    }),
  );
  return sql('citus/coordinator/next_due', { kinds, probes: JSON.stringify(Object.fromEntries(found)) });
}
