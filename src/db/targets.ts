// Writes the config's business databases into timeout_center.targets (sql/0009), where the map
// reads their fleet-wide rate limits. Like src/db/kinds.ts: the config's rateLimit always goes to
// config_rate_limit (what `limit --database <name> --reset` restores), and to the live rate_limit
// only while the row's controls_source is 'config', so a change made at run time survives
// restarts. A change of the live limit is audited by the targets_controls_audit trigger with the
// actor "config". Rows of databases no longer declared are kept (another process may still run an
// older config); no shard targets them unless a config declares them again.
import type pg from 'pg';
import type { Config } from '../config.js';
import { sql } from './queries.js';

export async function syncTargets(pool: pg.Pool, databases: Config['businessDatabases']): Promise<void> {
  const names = Object.keys(databases);
  if (names.length === 0) return;
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(`SELECT set_config('timeout_center.actor', 'config', true)`);
    await client.query(sql('db/sync_targets', { targets: names, rateLimits: names.map((n) => databases[n]!.rateLimit ?? null) }));
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}
