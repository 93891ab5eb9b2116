// `timeout-center generate`: a demo order generator for the compose fleet and load trials. Every
// second it creates --rate orders (status unpaid) with their timeouts in one transaction, as a
// shop would, and pays --paid percent of the still-pending ones, cancelling their timeouts in the
// same transaction. The orders table is the one config.example.yaml's handlers update. Runs until
// SIGTERM/SIGINT (or --duration); logs a JSON line every 10 s.
// On a Citus layout (docs/scale.md "Citus: what runs") every timeout names its bucket
// (timeout_center.bucket_of(biz_id)), and so does every order when the orders table has a bucket
// column (orders distributed and colocated with the timeouts); the payments cancel by bucket, with
// no `FOR UPDATE` (Citus takes it only in a query on one shard): see generateCitus below.
import { CommanderError, Option, type Command } from 'commander';
import type pg from 'pg';
import { layoutOf } from '../../db/citus-layout.js';
import { createPool } from '../../db/pool.js';
import { createLogger } from '../../observability/logger.js';
import { checkPostgres } from '../../db/reachability.js';
import { centerUrl } from './common.js';

function intIn(flag: string, min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) throw new CommanderError(2, 'tc.input', `${flag} must be an integer from ${min} to ${max}, got "${value}"`);
    return n;
  };
}

interface GenerateOptions {
  databaseUrl?: string;
  config?: string;
  rate: number;
  minDelay: number;
  maxDelay: number;
  paid: number;
  kind: string;
  duration?: number;
}

export function registerGenerate(program: Command): void {
  program
    .command('generate')
    .description('demo order generator: inserts unpaid orders with their timeouts every second and pays some of them (cancelling their timeouts)')
    .addOption(new Option('--database-url <url>', 'PostgreSQL URL of the timeout center and the orders').env('DATABASE_URL'))
    .option('--rate <n>', 'orders per second', intIn('--rate', 1, 100_000), 50)
    .option('--min-delay <seconds>', 'earliest due time after creation', intIn('--min-delay', 0, 86_400), 5)
    .option('--max-delay <seconds>', 'latest due time after creation', intIn('--max-delay', 0, 86_400), 60)
    .option('--paid <percent>', 'percent of pending orders paid each second', intIn('--paid', 0, 100), 2)
    .option('--kind <kind>', 'timeout kind to schedule (declared in the config, registered by migrate)', 'order.unpaid')
    .option('--duration <seconds>', 'stop after this long (default: until SIGTERM)', intIn('--duration', 1, 31_536_000))
    .action(async (opts: GenerateOptions) => {
      // DATABASE_URL / --database-url, else the databaseUrl of -c/--config.
      opts.databaseUrl = centerUrl(opts);
      if (opts.maxDelay < opts.minDelay) throw new CommanderError(2, 'tc.input', `--max-delay (${opts.maxDelay}) is below --min-delay (${opts.minDelay})`);
      const logger = createLogger(process.env['LOG_LEVEL'] === 'debug' ? 'debug' : 'info', { role: 'generator' });
      const pool = createPool({ connectionString: opts.databaseUrl, max: 2, applicationName: 'timeout-center generate', logger });
      await checkPostgres(pool, opts.databaseUrl);
      // The kind enum, not the kinds table: the generator runs as a writer (docs/roles.md), which
      // may not read the center's tables.
      const { rows: kinds } = await pool
        .query<{ registered: boolean }>('SELECT $1 = ANY (enum_range(NULL::timeout_center.kind)::text[]) AS registered', [opts.kind])
        .catch((err: Error) => {
          throw new CommanderError(2, 'tc.schema', `cannot read the kinds of timeout_center (${err.message}): run \`timeout-center migrate\` first`);
        });
      if (!kinds[0]?.registered) {
        throw new CommanderError(
          2,
          'tc.input',
          `kind "${opts.kind}" is not registered: declare it in the config and run \`timeout-center migrate --config ...\``,
        );
      }
      // Created when missing; a deployment's init step creates them and grants them to the
      // generator's login, which may not create tables (deploy/, docs/roles.md).
      const { rows: missing } = await pool.query<{ orders: boolean; seq: boolean }>(
        `SELECT to_regclass('orders') IS NULL AS orders, to_regclass('orders_generator_seq') IS NULL AS seq`,
      );
      if (missing[0]?.orders) await pool.query('CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz)');
      if (missing[0]?.seq) await pool.query('CREATE SEQUENCE IF NOT EXISTS orders_generator_seq');
      await pool.query(`SELECT setval('orders_generator_seq', greatest((SELECT max(id) FROM orders), (SELECT last_value FROM orders_generator_seq), 1))`);

      const citus = (await layoutOf(pool)).name === 'citus';
      const ordersHaveBucket =
        citus &&
        (
          await pool.query(
            `SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'orders' AND column_name = 'bucket'`,
          )
        ).rows.length > 0;

      let stopping = false;
      const stop = () => (stopping = true);
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
      const endAt = opts.duration ? Date.now() + opts.duration * 1000 : Infinity;
      const totals = { created: 0, paid: 0 };
      let lastLog = Date.now();
      logger.info({ rate: opts.rate, kind: opts.kind, delay: [opts.minDelay, opts.maxDelay], paidPercent: opts.paid }, 'generating orders');
      while (!stopping && Date.now() < endAt) {
        const tickStart = Date.now();
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          const tick = citus ? await generateCitus(client, opts, ordersHaveBucket) : await generatePlain(client, opts);
          await client.query('COMMIT');
          totals.created += tick.created;
          totals.paid += tick.paid;
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          logger.warn({ err }, 'generator batch failed; retrying next second');
        } finally {
          client.release();
        }
        if (Date.now() - lastLog >= 10_000) {
          lastLog = Date.now();
          logger.info(totals, 'orders generated');
        }
        await new Promise((r) => setTimeout(r, Math.max(0, 1000 - (Date.now() - tickStart))));
      }
      logger.info(totals, 'generator stopped');
      await pool.end();
    });
}

/** One second's orders and payments on one PostgreSQL (or a store), in the caller's transaction. */
async function generatePlain(client: pg.PoolClient, opts: GenerateOptions): Promise<{ created: number; paid: number }> {
  // New orders and their deadlines, in the shop's own transaction.
  const created = await client.query(
    `WITH o AS (
       INSERT INTO orders (id, status) SELECT nextval('orders_generator_seq'), 'unpaid' FROM generate_series(1, $1::int)
       ON CONFLICT (id) DO NOTHING RETURNING id)
     INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
     SELECT $2, o.id::text, now() + ($3::float8 + random() * ($4::float8 - $3::float8)) * interval '1 second' FROM o`,
    [opts.rate, opts.kind, opts.minDelay, opts.maxDelay],
  );
  // Some customers pay: the order and the cancel of its timeout commit together.
  const paid = await client.query(
    `WITH pay AS (
       UPDATE timeout_center.timeouts t SET state = 'cancelled', finished_at = now()
        WHERE t.id IN (SELECT id FROM timeout_center.timeouts
                        WHERE kind = $1 AND state = 'pending' AND random() * 100 < $2
                        LIMIT greatest(1, $3::int * $2::int / 100) FOR UPDATE SKIP LOCKED)
       RETURNING t.biz_id)
     UPDATE orders o SET status = 'paid' FROM pay WHERE o.id = pay.biz_id::bigint AND o.status = 'unpaid'`,
    [opts.kind, opts.paid, opts.rate],
  );
  return { created: created.rowCount ?? 0, paid: paid.rowCount ?? 0 };
}

/**
 * One second's orders and payments on a Citus layout, in the caller's transaction: the ids are
 * drawn first, then the orders (with their bucket when the table has one) and the timeouts (each
 * with its bucket) are inserted from them; a sample of pending timeouts is read (a multi-shard read,
 * no lock), cancelled by bucket and id where still pending (a multi-shard UPDATE: a row a claim
 * holds is waited for, then no longer pending), and exactly the orders whose timeout this cancelled
 * are paid. Citus commits the transaction on every node it touched. One connection per worker
 * node for the multi-shard statements (max_adaptive_executor_pool_size 1): Citus keeps it open
 * between ticks, where by default it opened several per node every second (measured on the
 * three-node test cluster, 2 cores under load: 200 timeouts over 16 buckets took 2.4 s, 64 ms so).
 */
async function generateCitus(client: pg.PoolClient, opts: GenerateOptions, ordersHaveBucket: boolean): Promise<{ created: number; paid: number }> {
  await client.query('SET LOCAL citus.max_adaptive_executor_pool_size = 1');
  const { rows: drawn } = await client.query<{ id: string }>(`SELECT nextval('orders_generator_seq')::text AS id FROM generate_series(1, $1::int)`, [
    opts.rate,
  ]);
  const ids = drawn.map((r) => r.id);
  const inserted = await client.query<{ id: string }>(
    ordersHaveBucket
      ? `INSERT INTO orders (id, bucket, status) SELECT i, timeout_center.bucket_of(i::text), 'unpaid' FROM unnest($1::bigint[]) i
         ON CONFLICT DO NOTHING RETURNING id::text`
      : `INSERT INTO orders (id, status) SELECT i, 'unpaid' FROM unnest($1::bigint[]) i ON CONFLICT (id) DO NOTHING RETURNING id::text`,
    [ids],
  );
  const created = await client.query(
    `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at, bucket)
     SELECT $2, i, now() + ($3::float8 + random() * ($4::float8 - $3::float8)) * interval '1 second', timeout_center.bucket_of(i)
       FROM unnest($1::text[]) i`,
    [inserted.rows.map((r) => r.id), opts.kind, opts.minDelay, opts.maxDelay],
  );
  const { rows: sample } = await client.query<{ biz_id: string; bucket: number }>(
    `SELECT biz_id, bucket FROM timeout_center.timeouts WHERE kind = $1 AND state = 'pending' AND random() * 100 < $2
      LIMIT greatest(1, $3::int * $2::int / 100)`,
    [opts.kind, opts.paid, opts.rate],
  );
  if (sample.length === 0 || opts.paid === 0) return { created: created.rowCount ?? 0, paid: 0 };
  const { rows: cancelled } = await client.query<{ biz_id: string; bucket: number }>(
    `UPDATE timeout_center.timeouts SET state = 'cancelled', finished_at = now()
      WHERE bucket = ANY($2::smallint[]) AND kind = $1 AND biz_id = ANY($3::text[]) AND state = 'pending'
      RETURNING biz_id, bucket`,
    [opts.kind, [...new Set(sample.map((r) => r.bucket))], sample.map((r) => r.biz_id)],
  );
  if (cancelled.length === 0) return { created: created.rowCount ?? 0, paid: 0 };
  const paid = await client.query(
    ordersHaveBucket
      ? `UPDATE orders SET status = 'paid' WHERE bucket = ANY($2::smallint[]) AND id = ANY($1::bigint[]) AND status = 'unpaid'`
      : `UPDATE orders SET status = 'paid' WHERE id = ANY($1::bigint[]) AND status = 'unpaid'`,
    ordersHaveBucket ? [cancelled.map((r) => r.biz_id), [...new Set(cancelled.map((r) => r.bucket))]] : [cancelled.map((r) => r.biz_id)],
  );
  return { created: created.rowCount ?? 0, paid: paid.rowCount ?? 0 };
}
