// The statement benches' drain (bench/statements.ts, bench/schema.ts): C connections each looping
// one step until a step finds nothing, then a check that every timeout went and every unpaid order
// closed. No processes, no Redis: what a statement costs on its own.
import type pg from 'pg';

/** Runs step on `connections` connections until each gets 0; returns the rows and the seconds. */
export async function drainLoop(
  pool: pg.Pool,
  connections: number,
  step: (client: pg.PoolClient, call: number) => Promise<number>,
): Promise<{ total: number; seconds: number }> {
  let calls = 0;
  let total = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async () => {
      const client = await pool.connect();
      try {
        for (;;) {
          const n = await step(client, ++calls);
          total += n;
          if (n === 0) break;
        }
      } finally {
        client.release();
      }
    }),
  );
  return { total, seconds: (performance.now() - started) / 1000 };
}

/** Throws unless `total` is all n timeouts and no unpaid order is left. */
export async function expectDrained(pool: pg.Pool, name: string, n: number, total: number): Promise<void> {
  const { rows } = await pool.query<{ open: number }>(`SELECT count(*)::int AS open FROM orders WHERE status = 'unpaid'`);
  if (total !== n || rows[0]!.open !== 0) throw new Error(`${name}: drained ${total} of ${n}, ${rows[0]!.open} unpaid left`);
}
