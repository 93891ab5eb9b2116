// Writes the config's kinds into timeout_center.kinds. Each kind is also a label of the enum
// timeout_center.kind, the type of timeouts.kind (sql/0017): the kinds_keep_labels trigger adds
// the label of a new kind in this transaction, usable once it commits, so an INSERT of a kind no
// config declared fails on the enum's input.
//
// Flow control (paused, max_running_shards, rate_limit): the config's values always go to the
// config_* columns (what `limit <kind> --reset` restores), and to the live columns only while the
// kind's controls_source is 'config'; a change made at run time (controls_source 'operator')
// survives restarts. A change of the live columns is audited by the kinds_controls_audit trigger
// (sql/0006) with the actor "config".
import type pg from 'pg';
import type { Config } from '../config.js';
import { kindSettleTemplate } from '../settle/settle-statement.js';
import { sql } from './queries.js';

export async function syncKinds(pool: pg.Pool, kinds: Config['kinds']): Promise<void> {
  const names = Object.keys(kinds);
  const list = Object.values(kinds);
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SELECT set_config('timeout_center.actor', 'config', true)`);
    await client.query(
      sql('db/sync_kinds', {
        kinds: names,
        shardSizes: list.map((k) => k.shardSize),
        maxAttempts: list.map((k) => k.maxAttempts),
        backoffMs: list.map((k) => k.backoffMs),
        handlerTypes: list.map((k) => k.handler.type),
        descriptions: list.map((k) => k.description ?? null),
        paused: list.map((k) => k.paused),
        maxRunningShards: list.map((k) => k.maxRunningShards ?? null),
        rateLimits: list.map((k) => k.rateLimit ?? null),
        // What timeout_center.settle runs (sql/0021): the SQL handler, where it runs here.
        settleStatements: list.map((k) => kindSettleTemplate(k) ?? null),
      }),
    );
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}
