// `timeout-center generate`: a demo order generator for the compose fleet and load trials. Every
// second it creates --rate orders (status unpaid) with their timeouts in one transaction, as a
// shop would, and pays --paid percent of the still-pending ones, cancelling their timeouts in the
// same transaction. The orders table is the one config.example.yaml's handlers update. Runs until
// SIGTERM/SIGINT (or --duration); logs a JSON line every 10 s.
import { CommanderError, Option, type Command } from 'commander';
import { createPool } from '../../db/pool.js';
import { createLogger } from '../../observability/logger.js';
import { checkPostgres } from '../../runtime.js';
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
      const { rows: kinds } = await pool.query('SELECT 1 FROM timeout_center.kinds WHERE kind = $1', [opts.kind]).catch((err: Error) => {
        throw new CommanderError(2, 'tc.schema', `cannot read timeout_center.kinds (${err.message}): run \`timeout-center migrate\` first`);
      });
      if (kinds.length === 0) {
        throw new CommanderError(
          2,
          'tc.input',
          `kind "${opts.kind}" is not registered: declare it in the config and run \`timeout-center migrate --config ...\``,
        );
      }
      await pool.query(`CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL, closed_at timestamptz);
        CREATE SEQUENCE IF NOT EXISTS orders_generator_seq;
        SELECT setval('orders_generator_seq', greatest((SELECT max(id) FROM orders), (SELECT last_value FROM orders_generator_seq), 1))`);

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
          await client.query('COMMIT');
          totals.created += created.rowCount ?? 0;
          totals.paid += paid.rowCount ?? 0;
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
