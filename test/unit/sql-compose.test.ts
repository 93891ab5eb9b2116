// claim.sql as a typed composition: its handler and claim-order lines are slots the file declares
// (`-- @slot`), filled by compose() / composeClaim(), not found by regular expressions. The
// worker runs the default composition as the plain claim, so it must be the statement as written;
// each slot must be replaced once, as written. The `@ts-expect-error` lines are checked by
// `npm run typecheck` (tsconfig.json includes test/): they fail it if the error goes away.
import { describe, expect, it } from 'vitest';
import { compose, sql, statement, statementValues } from '../../src/db/queries.js';
import { composeClaim } from '../../src/worker/sql-handler.js';

const plain = statement('worker/claim');
const HANDLER_LINE = '  SELECT NULL::text WHERE false -- tc:handler (the batch form puts the SQL handler here)';
const ORDER_LINE =
  "  SELECT f.id, f.biz_id, f.payload, f.due_at, f.trace_parent FROM timeout_center.claim_fresh_oldest($1, $2, $3) f -- tc:claim-order (sql-handler.ts: the newest-first form of a flood's shard)";

/** The lines of b that differ from a's, by position (both have the same number of lines). */
function changedLines(a: string, b: string): { index: number; from: string; to: string }[] {
  const la = a.split('\n');
  const lb = b.split('\n');
  expect(lb).toHaveLength(la.length);
  return la.flatMap((line, index) => (line === lb[index] ? [] : [{ index, from: line, to: lb[index]! }]));
}

describe('claim.sql composition', () => {
  it('the default composition is the plain statement, byte for byte', () => {
    expect(compose('worker/claim', {})).toBe(plain);
    expect(composeClaim({})).toBe(plain);
    expect(composeClaim({ claimOrder: 'oldest' })).toBe(plain);
    expect(sql('worker/claim', { shardId: 1, kind: 'k', claimLimit: 2, batch: false }).text).toBe(plain);
    // The slot lines are in the statement, once each, and the annotation lines are not.
    expect(plain.split('\n').filter((l) => l === HANDLER_LINE)).toHaveLength(1);
    expect(plain.split('\n').filter((l) => l === ORDER_LINE)).toHaveLength(1);
    expect(plain).not.toMatch(/@slot|@params/);
  });

  it('fills the handler slot once, replacing exactly its line', () => {
    const out = composeClaim({ handler: '  HANDLER' });
    expect(changedLines(plain, out)).toEqual([{ index: plain.split('\n').indexOf(HANDLER_LINE), from: HANDLER_LINE, to: '  HANDLER' }]);
    expect(out.split('HANDLER')).toHaveLength(2);
  });

  it('puts handler text with $$, $& and $1 into the statement as written', () => {
    const handler = "  UPDATE orders SET note = $$a $& b$$ || $tag$ $1 $tag$ WHERE id = ANY($1) AND s = '$&' RETURNING id::text";
    const out = composeClaim({ handler });
    expect(out).toContain(handler);
    expect(out.replace(handler, HANDLER_LINE)).toBe(plain);
  });

  it('the newest-first form differs from the oldest-first one only on the claim-order line', () => {
    const oldest = composeClaim({ handler: '  H' });
    const newest = composeClaim({ handler: '  H', claimOrder: 'newest' });
    const newestLines = newest.split('\n');
    const at = oldest.split('\n').indexOf(ORDER_LINE);
    expect(at).toBeGreaterThan(0);
    // The read of fresh rows becomes the newest-first function's (sql/0052: from the shard's
    // ceiling, else the flood's instant, down).
    expect(newestLines[at]).toBe('  SELECT f.id, f.biz_id, f.payload, f.due_at, f.trace_parent FROM timeout_center.claim_fresh_newest($1, $2, $3) f');
    expect(changedLines(oldest, newest)).toEqual([{ index: at, from: ORDER_LINE, to: newestLines[at] }]);
    expect(composeClaim({ claimOrder: 'newest' }).replace(newestLines[at]!, ORDER_LINE)).toBe(plain);
  });

  it('knows the slots at compile time', () => {
    // @ts-expect-error: claim.sql declares no slot "orderBy"
    expect(() => compose('worker/claim', { orderBy: 'x' })).not.toThrow();
    // @ts-expect-error: only 'oldest' and 'newest'
    composeClaim({ claimOrder: 'sideways' });
    // @ts-expect-error: a statement without slots cannot be composed
    compose('worker/finish', {});
  });
});

describe('sql(name, inputs)', () => {
  it('binds named inputs in $n order', () => {
    expect(sql('worker/lock_shard', { leaseToken: 't', shardId: 7 }).values).toEqual([7, 't']);
    expect(statementValues('worker/claim', { batch: true, claimLimit: 3, kind: 'k', shardId: 9 })).toEqual([9, 'k', 3, true]);
    expect(sql('worker/business_markers').values).toEqual([]);
  });

  it('refuses missing, misspelt and mistyped inputs at compile time, and missing or unknown ones at run time', () => {
    // @ts-expect-error: leaseToken is missing
    expect(() => sql('worker/lock_shard', { shardId: 7 })).toThrow(/worker\/lock_shard: input leaseToken is missing/);
    // @ts-expect-error: leaseTokn is misspelt
    expect(() => sql('worker/lock_shard', { shardId: 7, leaseToken: 't', leaseTokn: 't' })).toThrow(/unknown input\(s\) leaseTokn/);
    // @ts-expect-error: shardId is a number
    sql('worker/lock_shard', { shardId: '7', leaseToken: 't' });
    // @ts-expect-error: the statement takes inputs
    expect(() => sql('worker/lock_shard')).toThrow(/missing/);
  });
});
