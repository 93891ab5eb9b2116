// Step 1 of an external run, the claim, and what it hands on (Claimed). The commit-first claim in
// the form of each layout (claimPlain, claimInBucket: center-forms.ts picks one) and the two-phase
// claim (claimTwoPhase), each with its statement (claimStatement: external_claim.sql commit first,
// external_two_phase_claim.sql in two phases), oldest or newest rows first.
import type pg from 'pg';
import { isConnectionError } from '../../db/pool.js';
import { compose, sql, statementValues } from '../../db/queries.js';
import { AS_TEXT, literalOf, parseIntArray, parseJsonbArray, parseTextArray, withLiteral } from '../../db/pg-text.js';
import { bindLiterals } from '../bind-literals.js';
import type { ShardItem } from '../handler-contract.js';
import type { ExternalTarget } from '../handlers.js';
import type { Lease } from '../lease.js';
import type { Lateness } from '../outcome.js';
import { NEWEST_FIRST } from '../sql-handler.js';

/** external_claim.sql for every other shard of a flood mapped ahead (take_lease.sql from_newest):
 *  the newest rows due by the flood's instant first, so two running shards walk past each other's
 *  held rows from opposite ends. */
const NEWEST_EXTERNAL_CLAIM = compose('worker/external_claim', { claimOrder: NEWEST_FIRST });

/** external_two_phase_claim.sql for every other shard of a flood mapped ahead: newest first. */
const NEWEST_TWO_PHASE_CLAIM = compose('worker/external_two_phase_claim', { claimOrder: NEWEST_FIRST });

/** Around an external claim, the planner's ways of reading every due row and sorting them are
 *  off, for the claim alone: it walks the due index in order to its limit whatever the row
 *  estimate, as claim.sql's read does in its function (sql/0052: a flood written after the last
 *  ANALYZE was read whole, and sorted on disk, by every claim of it). These statements hold no
 *  statement of the kind's, so the settings are set in their transaction and reset after. */
const IN_KEY_ORDER = ['SET LOCAL enable_bitmapscan = off', 'SET LOCAL enable_seqscan = off', 'SET LOCAL enable_sort = off'];
const PLANNER_AS_BEFORE = ['SET LOCAL enable_bitmapscan TO DEFAULT', 'SET LOCAL enable_seqscan TO DEFAULT', 'SET LOCAL enable_sort TO DEFAULT'];

/** The claim between IN_KEY_ORDER and PLANNER_AS_BEFORE, as the statements of one simple query,
 *  and where its own result is among theirs. */
export function inKeyOrder(claim: string): { statements: string[]; at: number } {
  return { statements: [...IN_KEY_ORDER, claim, ...PLANNER_AS_BEFORE], at: IN_KEY_ORDER.length };
}

/** A target that no business database name can be: biz_ids the routing rule cannot place. */
export const UNROUTABLE = '-unroutable';

export interface Claimed {
  target: string | null;
  /** False when the rows were held by an earlier run of the shard: a marker may exist. */
  fresh: boolean;
  /** Set once the target said there is no marker (or the run wrote its own). */
  markerKnown: boolean;
  items: ShardItem[];
  /** The items' biz_ids, in their order (never changed: their literal may be known, pg-text.ts). */
  bizIds: string[];
  /** Up to 32 distinct schedule trace contexts of the claimed rows (external_claim.sql). */
  traceParents: string[];
}

/** The business database a run of these rows applies in: the handler's own, or the one the
 *  routing rule picked (the shard's target); undefined for an HTTP handler, and for a code handler
 *  without a database (it runs in the center's). */
export function targetDatabase(external: ExternalTarget, target: string | null): string | undefined {
  if (external.via === 'http') return undefined;
  return external.database ?? (external.via === 'sql' ? (target ?? undefined) : undefined);
}

/** A claim's row as text (AS_TEXT): external_claim.sql's (payloads NULL when the handler does
 *  not read them), or its Citus form's (whose arrays are NULL when it took no row). */
interface ClaimRow {
  biz_ids: string | null;
  payloads: string | null;
  trace_parents: string | null;
}

/** The claimed rows, less those given back to a shard that held them first (external_unhold.sql,
 *  by biz_id: one live timeout per kind and biz_id). */
export function claimedRows(target: string | null, fresh: boolean, row: ClaimRow, givenBack: ReadonlySet<string>): Claimed {
  const bizIds = parseTextArray(row.biz_ids ?? '{}');
  const payloads = row.payloads === null ? [] : parseJsonbArray(row.payloads);
  const all = bizIds.map((bizId, i) => ({ bizId, payload: payloads[i] }));
  let kept = { bizIds, items: all };
  if (givenBack.size === 0) {
    // the whole claim: the items' biz_ids go to the handler and the marker as the claim sent them
    const literal = literalOf(bizIds);
    if (literal !== undefined) withLiteral(all, literal);
  } else {
    const keep = bizIds.map((bizId) => !givenBack.has(bizId));
    kept = { bizIds: bizIds.filter((_, i) => keep[i]), items: all.filter((_, i) => keep[i]) };
  }
  return {
    target,
    fresh,
    markerKnown: fresh,
    items: kept.items,
    bizIds: kept.bizIds,
    traceParents: row.trace_parents === null || row.trace_parents === '{}' ? [] : parseTextArray(row.trace_parents),
  };
}

/** A claim for a lease, bound, oldest or newest first: external_claim.sql (commit first) or
 *  external_two_phase_claim.sql (two phases), which take the same inputs. */
export function claimStatement(form: 'commit-first' | 'two-phase', lease: Lease, external: ExternalTarget): string {
  const routed = external.via === 'sql' && external.routed;
  const payloads = external.via !== 'sql' || external.payloads;
  const inputs = { shardId: lease.id, kind: lease.kind, claimLimit: lease.claim_limit, leaseToken: lease.lease_token, routed, payloads };
  if (form === 'two-phase')
    return lease.from_newest
      ? bindLiterals(NEWEST_TWO_PHASE_CLAIM, statementValues('worker/external_two_phase_claim', inputs))
      : bindLiterals(sql('worker/external_two_phase_claim', inputs));
  return lease.from_newest
    ? bindLiterals(NEWEST_EXTERNAL_CLAIM, statementValues('worker/external_claim', inputs))
    : bindLiterals(sql('worker/external_claim', inputs));
}

/** The claim's rows from external_claim.sql's and external_unhold.sql's results (undefined: the
 *  lease is no longer ours). */
function claimedFrom(claimResult: pg.QueryResult, unholdResult: pg.QueryResult): Claimed | undefined {
  const row = (claimResult as pg.QueryResult<{ target: string | null; biz_ids: string; payloads: string | null; fresh: string; trace_parents: string | null }>)
    .rows[0];
  if (!row) return undefined;
  const givenBack = new Set(parseTextArray((unholdResult as pg.QueryResult<{ given_back: string }>).rows[0]!.given_back));
  return claimedRows(row.target, row.fresh === 't', row, givenBack);
}

/** Step 1, commit first: claim and commit (or take back the rows a previous run of the shard
 *  holds): the claims of the kind's target one at a time (external_claim_lock.sql), the claim (in
 *  key order: inKeyOrder), and its give-back (external_unhold.sql, a snapshot of its own) in one
 *  transaction, one round trip. Undefined when the lease is no longer ours. */
export async function claimPlain(pool: pg.Pool, lease: Lease, external: ExternalTarget): Promise<Claimed | undefined> {
  const claim = claimStatement('commit-first', lease, external);
  const unhold = bindLiterals(sql('worker/external_unhold', { shardId: lease.id, kind: lease.kind }));
  const lock = bindLiterals(sql('worker/external_claim_lock', { shardId: lease.id }));
  const keyed = inKeyOrder(claim);
  const statements = ['BEGIN', lock, ...keyed.statements, unhold, 'COMMIT'];
  const results = (await pool.query({ text: statements.join('; '), types: AS_TEXT })) as unknown as pg.QueryResult[];
  return claimedFrom(results[2 + keyed.at]!, results[2 + keyed.statements.length]!);
}

/**
 * Step 1 on the Citus layout (docs/scale.md "Citus: what runs"): the shard's row on the
 * coordinator, locked under this run's lease and marked claimed (citus/worker/external_claim_shard.sql),
 * then the claim in the shard's bucket, a router query on one worker node
 * (citus/worker/external_claim.sql), committed together: two round trips. Citus refuses the
 * plain statement, one query that locks rows on a worker node and writes the coordinator's shards.
 */
export async function claimInBucket(pool: pg.Pool, lease: Lease, external: ExternalTarget): Promise<Claimed | undefined> {
  const bucket = lease.bucket;
  if (bucket === null) throw new Error(`shard ${lease.id} has no bucket: the Citus claim runs only on the Citus layout (center-forms.ts)`);
  const routed = external.via === 'sql' && external.routed;
  const client = await pool.connect();
  let broken = false;
  try {
    const shard = bindLiterals(sql('citus/worker/external_claim_shard', { shardId: lease.id, leaseToken: lease.lease_token }));
    const first = (await client.query({ text: `BEGIN; ${shard}`, types: AS_TEXT })) as unknown as pg.QueryResult[];
    const ours = (first[1] as pg.QueryResult<{ target: string | null; fresh: string }>).rows[0];
    if (!ours) {
      await client.query('ROLLBACK');
      return undefined;
    }
    const fresh = ours.fresh === 't';
    const claim = bindLiterals(
      sql('citus/worker/external_claim', { shardId: lease.id, kind: lease.kind, claimLimit: lease.claim_limit, fresh, bucket, routed, target: ours.target }),
    );
    const second = (await client.query({ text: `${claim}; COMMIT`, types: AS_TEXT })) as unknown as pg.QueryResult[];
    return claimedRows(ours.target, fresh, (second[0] as pg.QueryResult<ClaimRow>).rows[0]!, new Set());
  } catch (err) {
    broken = isConnectionError(err);
    if (!broken) await client.query('ROLLBACK').catch(() => (broken = true));
    throw err;
  } finally {
    client.release(broken);
  }
}

/** external_two_phase_claim.sql's row, as text (AS_TEXT). */
interface TwoPhaseClaimRow {
  target: string | null;
  biz_ids: string;
  /** a tid[] literal, passed back to external_two_phase_move.sql as it came */
  ctids: string;
  payloads: string | null;
  trace_parents: string | null;
  lateness_ms: string;
  lateness_n: string;
  measured_ms: string;
  at_ms: string;
}

/** A two-phase run's claim: the rows locked in the run's open center transaction. */
export interface TwoPhaseClaim {
  claimed: Claimed;
  /** The locked rows' tid[] literal, passed back to external_two_phase_move.sql as it came. */
  ctids: string;
  /** How many of the rows a commit-first claim committed a hold on meanwhile (the run backs out). */
  overlapping: number;
  /** The rows' lateness measured by the claim at measuredMs, PostgreSQL's clock at the claim's end
   *  (atMs) and this node's then (atNodeMs, performance.now()): the run moves it on to its commit. */
  lateness: Lateness;
  measuredMs: number;
  atMs: number;
  atNodeMs: number;
}

/** Step 1 in two phases, in the center transaction `center` that the run keeps open: the claim
 *  (external_two_phase_claim.sql: the rows locked, nothing written; in key order: inKeyOrder),
 *  then the overlap check (external_two_phase_overlap.sql), one round trip. No claim lock (external_claim_lock.sql): the
 *  rows stay locked until the run ends, so the claims beside it pass them by; only a hold a
 *  commit-first claim committed meanwhile can overlap, and the overlap check finds it. */
export async function claimTwoPhase(center: pg.PoolClient, lease: Lease, external: ExternalTarget): Promise<TwoPhaseClaim | undefined> {
  const move = claimStatement('two-phase', lease, external);
  const overlap = bindLiterals(sql('worker/external_two_phase_overlap', { shardId: lease.id, kind: lease.kind }));
  const keyed = inKeyOrder(move);
  const results = (await center.query({ text: [...keyed.statements, overlap].join('; '), types: AS_TEXT })) as unknown as pg.QueryResult[];
  const atNodeMs = performance.now();
  const row = (results[keyed.at] as pg.QueryResult<TwoPhaseClaimRow>).rows[0];
  const overlapping = Number((results[keyed.statements.length] as pg.QueryResult<{ overlap: string }>).rows[0]!.overlap);
  if (!row) return undefined;
  return {
    claimed: claimedRows(row.target, true, row, new Set()),
    ctids: row.ctids,
    overlapping,
    lateness: { seconds: parseIntArray(row.lateness_ms).map((ms) => ms / 1000), times: parseIntArray(row.lateness_n) },
    measuredMs: Number(row.measured_ms),
    atMs: Number(row.at_ms),
    atNodeMs,
  };
}
