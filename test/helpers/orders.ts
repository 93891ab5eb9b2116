// A business schema for tests: orders, a trigger that records every status transition (to count
// effects), and rows that refuse to close (poison) for failure tests. Plus the invariant checks
// every end-to-end and fault test runs.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import type { ConfigInput } from '../../src/config.js';

export const CLOSE_SQL = "UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";

export async function createOrdersSchema(pool: pg.Pool): Promise<void> {
  await pool.query(`
    CREATE TABLE IF NOT EXISTS orders (
      id bigint PRIMARY KEY, status text NOT NULL, poison boolean NOT NULL DEFAULT false, closed_at timestamptz);
    CREATE TABLE IF NOT EXISTS order_transitions (
      order_id bigint NOT NULL, from_status text, to_status text, at timestamptz NOT NULL DEFAULT clock_timestamp());
    CREATE OR REPLACE FUNCTION orders_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.poison AND NEW.status = 'closed' THEN
        RAISE EXCEPTION 'order % cannot be closed (poison row)', NEW.id;
      END IF;
      IF NEW.status IS DISTINCT FROM OLD.status THEN
        INSERT INTO order_transitions (order_id, from_status, to_status) VALUES (NEW.id, OLD.status, NEW.status);
      END IF;
      RETURN NEW;
    END $$;
    DROP TRIGGER IF EXISTS orders_audit ON orders;
    CREATE TRIGGER orders_audit BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION orders_audit();`);
}

/** The closing handler for orders colocated with the timeouts on a Citus layout: the shard's bucket
 *  is $2 (README section 3e), so the claim, close and move run as one call on the bucket's node. */
export const CLOSE_SQL_COLOCATED =
  "UPDATE orders SET status = 'closed', closed_at = now() WHERE bucket = $2 AND id = ANY($1) AND status = 'unpaid' RETURNING id";

/**
 * createOrdersSchema's tables as a Citus user lays them out beside a Citus timeout database
 * (README section 3e, docs/scale.md "Citus: what runs"): orders and order_transitions each with a
 * bucket (timeout_center.bucket_of(id::text)), distributed on it and colocated with the timeouts, so
 * the orders trigger writes its transition on the same shard's node. Run after migrate (the layout).
 */
export async function createColocatedOrdersSchema(pool: pg.Pool): Promise<void> {
  // One connection (the setting), one statement each (Citus runs no DDL after a parallel operation
  // on a distributed table in the same transaction): the trigger first, then distributed with it.
  const client = await pool.connect();
  try {
    for (const statement of [
      'DROP TABLE IF EXISTS orders, order_transitions CASCADE',
      'SET citus.enable_unsafe_triggers = on',
      `CREATE TABLE orders (
         id bigint NOT NULL, bucket smallint NOT NULL, status text NOT NULL, poison boolean NOT NULL DEFAULT false, closed_at timestamptz,
         PRIMARY KEY (id, bucket))`,
      `CREATE TABLE order_transitions (
         order_id bigint NOT NULL, bucket smallint NOT NULL, from_status text, to_status text, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
      // (no key, so that a double close shows as two rows: the rebalancer's logical replication
      // needs a replica identity)
      'ALTER TABLE order_transitions REPLICA IDENTITY FULL',
      `CREATE OR REPLACE FUNCTION orders_audit() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.poison AND NEW.status = 'closed' THEN
           RAISE EXCEPTION 'order % cannot be closed (poison row)', NEW.id;
         END IF;
         IF NEW.status IS DISTINCT FROM OLD.status THEN
           INSERT INTO order_transitions (order_id, bucket, from_status, to_status) VALUES (NEW.id, NEW.bucket, OLD.status, NEW.status);
         END IF;
         RETURN NEW;
       END $$`,
      'CREATE TRIGGER orders_audit BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION orders_audit()',
      "SELECT create_distributed_table('order_transitions', 'bucket', colocate_with => 'timeout_center.timeouts')",
      "SELECT create_distributed_table('orders', 'bucket', colocate_with => 'timeout_center.timeouts')",
      'RESET citus.enable_unsafe_triggers',
    ])
      await client.query(statement);
  } finally {
    client.release();
  }
}

/** Writes a JSON config file in a fresh temp dir and returns its path. */
export function writeConfig(config: ConfigInput): string {
  const dir = mkdtempSync(join(tmpdir(), 'tc-config-'));
  const path = join(dir, 'timeout-center.json');
  writeFileSync(path, JSON.stringify(config, null, 2));
  return path;
}

export interface Invariants {
  /** I1: due timeouts not final. */
  lost: number;
  /** I2: orders that changed state more than once. */
  doubled: number;
  /** I3: paid orders closed, plus cancelled timeouts whose order closed. */
  wrong: number;
  /** I4: sum of scans' failed totals minus failed rows (0 when honest), once all scans reduced. */
  reduceMismatch: number;
  unreducedScans: number;
}

/** I1-I4. `colocated`: orders distributed on the bucket (createColocatedOrdersSchema): the joins of
 *  timeouts to orders name the bucket too (Citus joins distributed tables only on it). */
export async function checkInvariants(pool: pg.Pool, colocated = false): Promise<Invariants> {
  const cancelledButClosed = colocated
    ? `(SELECT count(*) FROM timeout_center.timeouts t JOIN orders o ON o.bucket = t.bucket AND o.id = t.biz_id::bigint
           WHERE t.state = 'cancelled' AND o.status = 'closed'
             AND NOT EXISTS (SELECT 1 FROM timeout_center.done_timeouts d WHERE d.bucket = t.bucket AND d.biz_id = t.biz_id AND d.result = 'applied')
             AND NOT EXISTS (SELECT 1 FROM timeout_center.timeouts t2 WHERE t2.bucket = t.bucket AND t2.biz_id = t.biz_id AND t2.state = 'done' AND t2.result = 'applied'))`
    : `(SELECT count(*) FROM timeout_center.all_timeouts t JOIN orders o ON o.id = t.biz_id::bigint
           WHERE t.state = 'cancelled' AND o.status = 'closed'
             AND NOT EXISTS (SELECT 1 FROM timeout_center.all_timeouts t2 WHERE t2.biz_id = t.biz_id AND t2.state = 'done' AND t2.result = 'applied'))`;
  const { rows } = await pool.query<Invariants>(`
    SELECT
      (SELECT count(*) FROM timeout_center.all_timeouts WHERE due_at <= now() AND state NOT IN ('done', 'cancelled', 'failed'))::int AS lost,
      (SELECT count(*) FROM (SELECT order_id FROM order_transitions GROUP BY order_id HAVING count(*) > 1) x)::int AS doubled,
      ((SELECT count(*) FROM order_transitions WHERE from_status = 'paid')
       + ${cancelledButClosed})::int AS wrong,
      ((SELECT coalesce(sum(failed), 0) FROM timeout_center.scans WHERE state = 'reduced')
       - (SELECT count(*) FROM timeout_center.all_timeouts WHERE state = 'failed'))::int AS "reduceMismatch",
      (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced')::int AS "unreducedScans"`);
  return rows[0]!;
}

/** Polls until every due timeout is final and every scan reduced (or the time runs out). */
export async function waitForDrain(pool: pg.Pool, timeoutMs: number, colocated = false): Promise<Invariants> {
  const deadline = Date.now() + timeoutMs;
  let inv = await checkInvariants(pool, colocated);
  while ((inv.lost > 0 || inv.unreducedScans > 0) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    inv = await checkInvariants(pool, colocated);
  }
  return inv;
}
