// Scenario 9: 200,000 timeouts due in the same second. The coordinator may only claim while the
// shards in flight stay under coordinator.maxInFlightShards, so the rest waits in the table, not
// in Redis or in memory; the coordinator's and workers' RSS stay flat while all of it drains.
// The processes run with a 64 MB old space (NODE_OPTIONS), so their RSS shows what they retain,
// not the heap headroom V8 takes when the box is busy (two CI runs, with other files beside this
// one, saw a worker at 166-168 MB against 110 MB in the first half, uncapped). A process that
// retained something per timeout would run out of memory and die. Knobs: TC_FLOOD_NODE_OPTIONS
// replaces that NODE_OPTIONS (e.g. an empty string: uncapped); TC_FLOOD_SAMPLES=<file> writes every
// sample as JSON.
import { writeFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { killAll } from '../helpers/processes.js';
import { KIND, report, rssMb, Scenario, sleep } from './harness.js';
import { streamKey } from '../../src/transport/keys.js';

const N = 200_000;
const MAX_IN_FLIGHT = 16;
const SHARD = 500;
let s: Scenario | undefined;

afterEach(async () => {
  await killAll();
  await s?.close();
  s = undefined;
});

interface Sample {
  at: number;
  inFlight: number;
  stream: number;
  done: number;
  rss: Record<string, number | undefined>;
}

const stats = (xs: number[]) => ({
  min: Math.round(Math.min(...xs)),
  max: Math.round(Math.max(...xs)),
  first: Math.round(xs[0]!),
  last: Math.round(xs[xs.length - 1]!),
});

describe('flood', () => {
  it('200,000 due in the same second: bounded claims, flat memory, all drained', async () => {
    s = await Scenario.create('fault-flood', {
      kind: { shardSize: SHARD },
      coordinator: { maxInFlightShards: MAX_IN_FLIGHT, claimChunk: 5000 },
      worker: { concurrency: 3 },
    });
    const nodeOptions = process.env['TC_FLOOD_NODE_OPTIONS'] ?? '--max-old-space-size=64';
    const env: Record<string, string> = nodeOptions ? { NODE_OPTIONS: nodeOptions } : {};
    const procs = [s.coordinator('coordinator', { env }), s.worker('worker-1', { env }), s.worker('worker-2', { env })];
    await procs[0]!.waitForMsg('became leader', 15_000);
    await Promise.all(procs.slice(1).map((w) => w.waitForMsg('worker started')));

    const seedStart = Date.now();
    // All due at the same instant, one second after the insert starts.
    await s.seed(N, { dueInMs: 1000, spreadMs: 0 });
    const seedMs = Date.now() - seedStart;

    const redis = new Redis(s.redisUrl, { maxRetriesPerRequest: 1 });
    const samples: Sample[] = [];
    const started = Date.now();
    try {
      for (;;) {
        const { rows } = await s.pool.query<{ in_flight: number; done: number; due_left: number }>(
          `SELECT (SELECT count(*) FROM timeout_center.shards WHERE state IN ('queued', 'running'))::int AS in_flight,
                  (SELECT coalesce(sum(done_count), 0) FROM timeout_center.shards WHERE state = 'done')::int AS done,
                  (SELECT count(*) FROM timeout_center.all_timeouts WHERE state IN ('pending', 'dispatched'))::int AS due_left`,
        );
        const r = rows[0]!;
        samples.push({
          at: Date.now() - started,
          inFlight: r.in_flight,
          stream: Number(await redis.xlen(streamKey(s.prefix, KIND))),
          done: r.done,
          rss: Object.fromEntries(procs.map((p) => [p.name, rssMb(p.pid)])),
        });
        if (r.due_left === 0) break;
        if (Date.now() - started > 150_000) throw new Error(`flood did not drain in 150 s: ${JSON.stringify(r)}`);
        await sleep(250);
      }
    } finally {
      redis.disconnect();
    }
    const drainMs = Date.now() - started;
    const dump = process.env['TC_FLOOD_SAMPLES'];
    if (dump) writeFileSync(dump, JSON.stringify(samples));

    const inv = await s.expectInvariants(30_000);
    expect(inv.applied).toBe(N);
    for (const p of procs) expect(p.alive, `${p.name} survived`).toBe(true);

    // Claims bounded: never more shards in flight (PostgreSQL) or waiting (Redis) than the bound.
    const maxInFlight = Math.max(...samples.map((x) => x.inFlight));
    const maxStream = Math.max(...samples.map((x) => x.stream));
    expect(maxInFlight, 'shards queued or running').toBeLessThanOrEqual(MAX_IN_FLIGHT);
    // A shard left queued past republishAfterMs (2 s here) while every worker slot is busy is
    // published again, once per republishAfterMs it waits (shards.publish_count); each later
    // message is dropped by the lease check. The rule, per shard: one publication when planned,
    // one more per republishAfterMs (plus a reap tick) it waited before its last lease, one per
    // lease that ran out. So the stream holds at most the shards in flight times the most
    // publications any shard had: bounded by the in-flight bound, never by N. (A fixed cap of 4
    // failed on a slow CI box, where one shard waited queued past four republishes.)
    const overPublished = await s.count(
      `SELECT count(*) AS n FROM timeout_center.shards
        WHERE publish_count > attempts + 1 + floor(extract(epoch FROM coalesce(started_at, now()) - created_at) / 2.0)`,
    );
    expect(overPublished, 'shards published more often than once per republishAfterMs they waited').toBe(0);
    const maxPublished = await s.count(`SELECT coalesce(max(publish_count), 1) AS n FROM timeout_center.shards`);
    expect(maxStream, 'stream entries').toBeLessThanOrEqual(maxPublished * MAX_IN_FLIGHT);
    const shards = await s.count(`SELECT count(*) AS n FROM timeout_center.shards`);
    const scans = await s.count(`SELECT count(*) AS n FROM timeout_center.scans`);

    // Flat memory: stays well below a ceiling, and the second half of the run does not run away
    // from the first; with the old space capped, that is what the processes retain (see above and
    // docs/reliability.md).
    const rss: Record<string, ReturnType<typeof stats> & { firstHalfMax: number; secondHalfMax: number }> = {};
    const half = samples.length >> 1;
    for (const p of procs) {
      const xs = samples.map((x) => x.rss[p.name]).filter((v): v is number => v !== undefined);
      const firstHalfMax = Math.max(...xs.slice(0, half));
      const secondHalfMax = Math.max(...xs.slice(half));
      rss[p.name] = { ...stats(xs), firstHalfMax: Math.round(firstHalfMax), secondHalfMax: Math.round(secondHalfMax) };
      expect(Math.max(...xs), `${p.name} RSS MB`).toBeLessThan(400);
      expect(secondHalfMax, `${p.name} RSS growth`).toBeLessThan(firstHalfMax * 1.5);
    }
    await s.stopAll();
    report('9 flood of 200,000 due in one second', {
      timeouts: N,
      seedMs,
      drainMs,
      throughputPerS: Math.round(N / (drainMs / 1000)),
      shards,
      scans,
      maxShardsInFlight: maxInFlight,
      maxStreamLength: maxStream,
      maxPublicationsOfOneShard: maxPublished,
      samples: samples.length,
      rssMb: rss,
      wallMs: s.elapsedMs(),
    });
  }, 240_000);
});
