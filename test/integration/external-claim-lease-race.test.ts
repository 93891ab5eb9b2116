// The external path's re-run claim, committed after its lease ran out: the race that stranded rows
// on the same-database path (pin-lease-race.test.ts). A shard of the external path (here a code
// handler) whose first run claimed and died holds its rows (shards.held_ids, still pending); its
// next run takes them back as dispatched rows of the shard (external_claim.sql taken_back),
// checking the lease only when the statement begins. Here the test plays a slow run: it leases the
// shard, takes the claim lock and begins the claim, which stalls on a row another transaction holds
// (before it writes the shard's row, so take_lease does not pass the shard by), past its lease;
// meanwhile a real worker leases the shard (attempt 3). Then the slow claim takes the 20 rows and
// commits. No row is left dispatched to a finished shard, and every order closes once: the
// worker's claim waits for the claim lock (external_claim_lock.sql) and takes the rows after the
// slow commit (here it splits them: the shard is a suspect re-run). With the claim lock taken out
// of the worker's claim, this passed as well, another way: the worker took nothing, and its record
// (external_record.sql) returned the shard's dispatched rows it did not run to pending, for the
// next scan. The same-database path had neither guard (its finish leaves dispatched rows as they
// are): its pin now holds the shard's row (isolate.ts pinRows).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from '../../src/db/queries.js';
import { readStranded } from '../../src/operations/stranded.js';
import { RedisStreamsChannel } from '../../src/transport/redis-streams.js';
import { claimStatement } from '../../src/worker/external/claim.js';
import type { Lease } from '../../src/worker/lease.js';
import { KIND, Scenario, sleep, waitUntil } from '../faults/harness.js';
import { killAll } from '../helpers/processes.js';

const scenarios: Scenario[] = [];

afterEach(async () => {
  await killAll();
  for (const s of scenarios.splice(0)) await s.close();
});

/** A code handler in the center's database (the external path): closes the unpaid orders given. */
function closeModule(): string {
  const path = join(mkdtempSync(join(tmpdir(), 'tc-ext-race-')), 'close.mjs');
  writeFileSync(
    path,
    `export default async function close(items, ctx) {
  const { rows } = await ctx.client.query("UPDATE orders SET status = 'closed', closed_at = now() WHERE id = ANY($1::bigint[]) AND status = 'unpaid' RETURNING id::text", [items.map((i) => i.bizId)]);
  return rows.map((r) => r.id);
}
`,
  );
  return path;
}

describe('an external re-run whose claim commits after its lease ran out', () => {
  it('leaves no row dispatched to a finished shard: the next run takes the rows after the slow commit; every order closes once', async () => {
    // debug: the worker's lines say when it took the delivery
    const s = await Scenario.create('ext-claim-race', {
      worker: { concurrency: 1 },
      kind: { maxAttempts: 5, handler: { type: 'code', module: closeModule() } },
      logLevel: 'debug',
    });
    scenarios.push(s);
    await s.seed(20);
    // The first run claimed the 20 rows (held, still pending) and died.
    const { rows: scan } = await s.pool.query<{ id: string }>(
      "INSERT INTO timeout_center.scans (epoch, coordinator, cutoff, state) VALUES (1, 'test', now(), 'mapped') RETURNING id",
    );
    const { rows: shard } = await s.pool.query<{ id: string }>(
      `INSERT INTO timeout_center.shards (scan_id, kind, seq, size, claim_limit, state, owner, lease_token, attempts, lease_expires_at,
                                          started_at, published_at, publish_count, claimed_at, held_ids)
       SELECT $1, $2::timeout_center.kind, 0, 20, 100, 'running', 'dead-worker', gen_random_uuid(), 1, now() - interval '1 second', now(), now(), 1,
              now() - interval '1 second', array_agg(id ORDER BY id)
         FROM timeout_center.timeouts WHERE kind = $2::timeout_center.kind
       RETURNING id`,
      [scan[0]!.id, KIND],
    );
    const shardId = Number(shard[0]!.id);
    const slow = new pg.Client({ connectionString: s.databaseUrl });
    const blocker = new pg.Client({ connectionString: s.databaseUrl });
    await slow.connect();
    await blocker.connect();
    const channel = new RedisStreamsChannel({ connection: { mode: 'single', url: s.redisUrl }, keyPrefix: s.prefix, logger: pino({ level: 'silent' }) });
    try {
      const { rows: leased } = await slow.query<Omit<Lease, 'bucket' | 'claimAt'>>(
        sql('worker/take_lease', { shardId, workerId: 'slow-worker', leaseMs: 300 }),
      );
      expect(leased[0], 'the slow run leased the shard').toMatchObject({ attempts: 2 });
      const lease: Lease = { ...leased[0]!, id: Number(leased[0]!.id), bucket: null, claimAt: 0 };
      // One of the held rows locked by another transaction: the slow claim's statement begins (its
      // lease still good) and stalls before it writes the shard's row, as a statement stalled by
      // the server would.
      await blocker.query('BEGIN');
      await blocker.query(`SELECT id FROM timeout_center.timeouts WHERE kind = $1 ORDER BY id DESC LIMIT 1 FOR UPDATE`, [KIND]);
      await slow.query('BEGIN');
      await slow.query(sql('worker/external_claim_lock', { shardId }));
      const claim = slow.query<{ biz_ids: string[] }>(claimStatement('commit-first', lease, { via: 'code', database: undefined }));
      await sleep(500); // its lease runs out

      const worker = s.worker('worker-1');
      await worker.waitForMsg('worker started');
      await channel.init([KIND]);
      await channel.publish([{ shardId, scanId: Number(scan[0]!.id), kind: KIND }]);
      await waitUntil(
        'the worker leased the shard (attempt 3)',
        async () => (await s.count(`SELECT attempts AS n FROM timeout_center.shards WHERE id = $1`, [shardId])) === 3,
        10_000,
      );
      await sleep(500); // the worker's claim is under way
      await blocker.query('COMMIT');
      expect((await claim).rows[0]?.biz_ids, 'the slow run took back the 20 rows its first run held').toHaveLength(20);
      await slow.query('COMMIT');
    } finally {
      await slow.end().catch(() => {});
      await blocker.end().catch(() => {});
      await channel.close().catch(() => {});
    }
    await waitUntil(
      'the shard finished',
      async () => (await s.count(`SELECT count(*) AS n FROM timeout_center.shards WHERE id = $1 AND state IN ('done', 'failed')`, [shardId])) === 1,
      15_000,
    );
    expect(await readStranded(s.pool), 'rows dispatched to a shard that is finished (no run will ever apply them)').toEqual([]);
    s.coordinator('coordinator');
    expect(await s.expectInvariants(30_000)).toMatchObject({ applied: 20, closed: 20, failed: 0 });
  }, 90_000);
});
