// Isolating the failing rows of a batch, on both execution paths: the handler runs on the whole
// batch inside a savepoint; a row-level failure rolls the savepoint back and the batch is split in
// halves, each tried the same way, until each failing id is alone (and failed with its error) and
// every other id ran. One bad row never holds back the rest of its shard. An error that belongs to
// the batch (the caller's `fatal`: a lost connection, a target down, the time limit) ends the
// split at once and is thrown.
import type pg from 'pg';
import { describeError } from './failures.js';
import { normalizeResult, PermanentError, type HandlerResult, type ShardItem } from './handler-contract.js';

export interface RowFailure {
  error: string;
  /** A PermanentError: no further attempts for this id. */
  permanent: boolean;
}

export interface Isolated {
  applied: Set<string>;
  failed: Map<string, RowFailure>;
  /** The handler's own list when its first call, on the whole batch, succeeded with no failed id
   *  (the usual case): its literal may be known (pg-text.ts), so the marker and the record send
   *  it on as it came. */
  whole?: string[];
}

export async function applyIsolating(
  client: pg.ClientBase,
  items: ShardItem[],
  call: (items: ShardItem[]) => Promise<HandlerResult | string[]>,
  fatal: (err: unknown) => boolean,
  out: Isolated = { applied: new Set(), failed: new Map() },
  depth = 0,
): Promise<Isolated> {
  const savepoint = `tc_split_${depth}`;
  await client.query(`SAVEPOINT ${savepoint}`);
  try {
    const result = normalizeResult(await call(items));
    await client.query(`RELEASE SAVEPOINT ${savepoint}`);
    if (depth === 0 && (result.failed ?? []).length === 0) out.whole = result.applied;
    for (const id of result.applied) out.applied.add(id);
    for (const f of result.failed ?? []) out.failed.set(String(f.bizId), { error: f.error, permanent: false });
    return out;
  } catch (err) {
    if (fatal(err)) throw err;
    await client.query(`ROLLBACK TO SAVEPOINT ${savepoint}; RELEASE SAVEPOINT ${savepoint}`);
    // Split even on a PermanentError: it condemns the id that caused it, not its batch mates.
    if (items.length === 1) {
      out.failed.set(items[0]!.bizId, { error: describeError(err), permanent: err instanceof PermanentError });
      return out;
    }
    const mid = Math.ceil(items.length / 2);
    await applyIsolating(client, items.slice(0, mid), call, fatal, out, depth + 1);
    await applyIsolating(client, items.slice(mid), call, fatal, out, depth + 1);
    return out;
  }
}
