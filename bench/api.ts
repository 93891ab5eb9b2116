// npm run bench:api [-- options]: the HTTP API (issue 33, "Load") against references run in the
// same run, on one `timeout-center run --api` process (coordinator + worker + API) over a fresh
// database on the local PostgreSQL and Redis:
//
//   1. batch rate: --batches batches of 5,000 timeouts through POST /v1/timeouts/batch, two in
//      flight, against the same rows (same batch size, two connections in flight) inserted by the
//      plain SQL a service would run (INSERT ... SELECT FROM unnest ... ON CONFLICT, the README's
//      upsert); interleaved rounds, best of each; goal API >= 0.5x SQL. Each round also reports the
//      CPU it cost per batch of 5,000, from /proc: the API process (`run --api`: HTTP, JSON, zod,
//      the pg client), the database's backends, and this process (building the requests, or the
//      SQL reference's arrays): on a box shared with other jobs the rates move with the load, the
//      CPU per batch much less.
//   2. single calls: POST /v1/timeouts at a steady --rate per second for --seconds (open loop: each
//      call starts on its tick whether or not the last answered), p50/p99/max; and the same calls
//      by schedule() over pg at the same rate as the reference.
//   3. the bad-input sweep while a burst drains: --n orders with timeouts due at one instant, and
//      from that instant until the burst is done every bad input the API documents is sent over
//      and over (malformed JSON, wrong types, unknown kind, a year 10000, a body over the limit,
//      no token, a token for another kind, a slow client that never finishes its body): every
//      answer must be the documented status and code, nothing of it written, and the burst's
//      invariants hold (every due timeout final, every unpaid order closed once, paid untouched).
//
//   --batches <b>   batches of 5,000 per round in (1) (default 10)
//   --rounds <r>    interleaved rounds of (1) (default 3)
//   --rate <r>      calls per second in (2) (default 200)
//   --seconds <s>   duration of (2) (default 10)
//   --n <count>     burst size in (3) (default 50,000)
//   --out <file>    also write the figures as JSON here
//   --help          this text
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import net from 'node:net';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { schedule } from '../dist/schedule.js';
import { freePort } from '../test/helpers/servers.ts';
import { createTestDatabase, TEST_REDIS_URL, testKeyPrefix } from '../test/helpers/services.ts';
import { writeConfig } from '../test/helpers/orders.ts';
import { CLOSE_MANY_SQL, KIND, ORDERS_DDL, correctness, insertOrders, sleep } from './lib/orders.ts';
import { processCpu } from './lib/profile.ts';
import { positiveCounts, printUsage } from './lib/usage.ts';

const { values: args } = parseArgs({
  options: {
    batches: { type: 'string' },
    rounds: { type: 'string' },
    rate: { type: 'string' },
    seconds: { type: 'string' },
    n: { type: 'string' },
    out: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (args.help) {
  printUsage(import.meta.url);
  process.exit(0);
}
const opt = positiveCounts(
  'bench:api',
  { batches: args.batches, rounds: args.rounds, rate: args.rate, seconds: args.seconds, n: args.n },
  { batches: 10, rounds: 3, rate: 200, seconds: 10, n: 50_000 },
);
const BATCH = 5000;
const TOKEN = 'bench-token-0123456789abcdef';
const OTHER_TOKEN = 'other-kind-token-0123456789';
const BODY_LIMIT = 4 * 1024 * 1024;
const REQUEST_TIMEOUT_MS = 2000;

const db = await createTestDatabase('bench_api', { empty: true });
const pool = new pg.Pool({ connectionString: db.url, max: 8 });
let proc: ChildProcess | undefined;
const figures: Record<string, unknown> = { options: opt, at: new Date().toISOString() };

function cli(argv: string[], env: Record<string, string>): ChildProcess {
  return spawn(process.execPath, ['dist/cli/main.js', ...argv], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const summary = (ms: number[]) => {
  const s = [...ms].sort((a, b) => a - b);
  return { calls: s.length, p50Ms: +pct(s, 50).toFixed(2), p99Ms: +pct(s, 99).toFixed(2), maxMs: +s[s.length - 1]!.toFixed(2) };
};

try {
  await pool.query(ORDERS_DDL);
  const configPath = writeConfig({
    redisKeyPrefix: testKeyPrefix('bench_api'),
    logLevel: 'warn',
    kinds: { [KIND]: { handler: { type: 'sql', sql: CLOSE_MANY_SQL } }, 'order.other': { handler: { type: 'sql', sql: CLOSE_MANY_SQL } } },
    api: { bodyLimitBytes: BODY_LIMIT, requestTimeoutMs: REQUEST_TIMEOUT_MS },
  });
  const env = {
    DATABASE_URL: db.url,
    REDIS_URL: TEST_REDIS_URL,
    TC_API_TOKENS: JSON.stringify([
      { name: 'bench', token: TOKEN, kinds: [KIND], verbs: ['*'] },
      { name: 'other', token: OTHER_TOKEN, kinds: ['order.other'], verbs: ['*'] },
    ]),
  };
  const migrate = cli(['migrate', '-c', configPath], env);
  const code = await new Promise<number | null>((r) => migrate.on('exit', (c) => r(c)));
  if (code !== 0) throw new Error('migrate failed');
  const port = await freePort();
  proc = cli(['run', '-c', configPath, '--api', String(port)], { ...env, LOG_LEVEL: 'warn' });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  proc.stdout!.resume();
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i += 1) {
    try {
      await fetch(`${base}/v1/openapi.json`);
      break;
    } catch {
      if (i > 300) throw new Error(`the API did not come up: ${stderr}`);
      await sleep(100);
    }
  }
  const post = (path: string, body: unknown, token = TOKEN) =>
    fetch(`${base}${path}`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

  // 1. batch rate, API vs SQL, interleaved rounds.
  let nextId = 10_000_000;
  const batchOf = () => {
    const from = nextId;
    nextId += BATCH;
    return Array.from({ length: BATCH }, (_, i) => ({ kind: KIND, bizId: String(from + i), delayMs: 86_400_000 }));
  };
  /** CPU seconds so far of the API process, of the database's backends (by pid: a backend that
   *  ended during a round is missed, one that started is counted whole), and of this process. */
  async function cpuNow(): Promise<{ api: number; pg: Map<number, number>; bench: number }> {
    const { rows } = await pool.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = current_database()');
    const u = process.cpuUsage();
    return { api: processCpu(proc?.pid), pg: new Map(rows.map((r) => [r.pid, processCpu(r.pid)])), bench: (u.user + u.system) / 1e6 };
  }
  const cpuRounds: { path: string; cpuMsPerBatch: { api: number; pg: number; bench: number; total: number } }[] = [];
  async function twoInFlight(run: (batch: ReturnType<typeof batchOf>) => Promise<void>, path?: string): Promise<number> {
    const batches = Array.from({ length: opt.batches }, batchOf);
    const before = await cpuNow();
    const started = performance.now();
    let i = 0;
    await Promise.all(
      [0, 1].map(async () => {
        while (i < batches.length) await run(batches[i++]!);
      }),
    );
    const rate = (opt.batches * BATCH) / ((performance.now() - started) / 1000);
    if (path) {
      const after = await cpuNow();
      let pgCpu = 0;
      for (const [pid, s] of after.pg) pgCpu += s - (before.pg.get(pid) ?? 0);
      const per = (sec: number) => +((sec * 1000) / opt.batches).toFixed(1);
      const api = path === 'api' ? per(after.api - before.api) : 0;
      const cpu = { api, pg: per(pgCpu), bench: per(after.bench - before.bench), total: 0 };
      cpu.total = +(cpu.api + cpu.pg + cpu.bench).toFixed(1);
      cpuRounds.push({ path, cpuMsPerBatch: cpu });
    }
    return rate;
  }
  const viaApi = async (batch: ReturnType<typeof batchOf>) => {
    const res = await post('/v1/timeouts/batch', { timeouts: batch });
    if (res.status !== 200) throw new Error(`batch answered ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  };
  const SQL_UPSERT = `INSERT INTO timeout_center.timeouts (kind, biz_id, due_at)
    SELECT k, b, now() + d * interval '1 millisecond' FROM unnest($1::text[], $2::text[], $3::float8[]) AS i(k, b, d)
    ON CONFLICT (kind, biz_id) WHERE state IN ('pending', 'dispatched') DO UPDATE SET due_at = EXCLUDED.due_at`;
  const viaSql = async (batch: ReturnType<typeof batchOf>) => {
    await pool.query(SQL_UPSERT, [batch.map((t) => t.kind), batch.map((t) => t.bizId), batch.map((t) => t.delayMs)]);
  };
  const api: number[] = [];
  const sqlRates: number[] = [];
  await twoInFlight(viaApi); // warm-up (JIT, plans, pools)
  await twoInFlight(viaSql);
  for (let r = 0; r < opt.rounds; r += 1) {
    if (r % 2 === 0) {
      api.push(await twoInFlight(viaApi, 'api'));
      sqlRates.push(await twoInFlight(viaSql, 'sql'));
    } else {
      sqlRates.push(await twoInFlight(viaSql, 'sql'));
      api.push(await twoInFlight(viaApi, 'api'));
    }
  }
  const bestApi = Math.max(...api);
  const bestSql = Math.max(...sqlRates);
  figures['batch'] = {
    rowsPerRound: opt.batches * BATCH,
    apiPerSecond: api.map(Math.round),
    sqlPerSecond: sqlRates.map(Math.round),
    bestApi: Math.round(bestApi),
    bestSql: Math.round(bestSql),
    ratio: +(bestApi / bestSql).toFixed(2),
    // CPU per batch of 5,000 in each round (ms): api (the API process; 0 on the SQL path), pg (the
    // database's backends), bench (this process), and the least total of each path.
    cpuMsPerBatch: cpuRounds,
    leastCpuMsPerBatch: {
      api: Math.min(...cpuRounds.filter((c) => c.path === 'api').map((c) => c.cpuMsPerBatch.total)),
      sql: Math.min(...cpuRounds.filter((c) => c.path === 'sql').map((c) => c.cpuMsPerBatch.total)),
    },
    load: loadavg().map((l) => +l.toFixed(1)),
  };
  console.log('batch', JSON.stringify(figures['batch']));
  await pool.query('DELETE FROM timeout_center.timeouts');
  await pool.query('VACUUM ANALYZE timeout_center.timeouts');

  // 2. single calls at a steady rate (open loop), API then schedule() over pg.
  async function steady(call: (i: number) => Promise<void>): Promise<number[]> {
    const total = opt.rate * opt.seconds;
    const interval = 1000 / opt.rate;
    const start = performance.now();
    const latencies: number[] = [];
    const calls: Promise<void>[] = [];
    for (let i = 0; i < total; i += 1) {
      const at = start + i * interval;
      const wait = at - performance.now();
      if (wait > 0) await sleep(wait);
      calls.push(
        (async () => {
          const t0 = performance.now();
          await call(i);
          latencies.push(performance.now() - t0);
        })(),
      );
    }
    await Promise.all(calls);
    return latencies;
  }
  const notOk: Record<string, number> = {};
  const apiLat = await steady(async (i) => {
    const res = await post('/v1/timeouts', { kind: KIND, bizId: `s-${i}`, delayMs: 86_400_000 });
    if (res.status !== 200) notOk[res.status] = (notOk[res.status] ?? 0) + 1;
    await res.arrayBuffer();
  });
  const sqlLat = await steady(async (i) => {
    await schedule(pool, { kind: KIND, bizId: `p-${i}`, delayMs: 86_400_000 });
  });
  figures['single'] = { ratePerSecond: opt.rate, seconds: opt.seconds, api: { ...summary(apiLat), notOk }, scheduleOverPg: summary(sqlLat) };
  console.log('single', JSON.stringify(figures['single']));
  await pool.query('DELETE FROM timeout_center.timeouts');

  // 3. the bad-input sweep while a burst drains.
  const N = opt.n;
  const { rows } = await pool.query<{ d: Date }>("SELECT now() + interval '4 seconds' AS d");
  const due = rows[0]!.d;
  await insertOrders(pool, 1, N, due);
  await pool.query(`INSERT INTO timeout_center.timeouts (kind, biz_id, due_at) SELECT $1, i::text, $2 FROM generate_series(1, $3) i`, [KIND, due, N]);
  await pool.query('VACUUM ANALYZE');
  const one = { kind: KIND, bizId: 'bad-1', delayMs: 1000 };
  type Case = { what: string; status: number; code: string; send: () => Promise<{ status: number; code: string | undefined }> };
  const json = async (res: Response) => ({ status: res.status, code: ((await res.json().catch(() => ({}))) as { error?: { code?: string } }).error?.code });
  const raw =
    (body: string, headers: Record<string, string> = {}) =>
    () =>
      fetch(`${base}/v1/timeouts`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', ...headers },
        body,
      }).then(json);
  /** A raw HTTP/1.1 request: the headers, then only the first bytes of the body; the answer. */
  const rawRequest = (headers: string, bodyStart: string) => () =>
    new Promise<{ status: number; code: string | undefined }>((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1');
      let text = '';
      socket.setEncoding('utf8');
      socket.on('data', (d: string) => (text += d));
      socket.on('error', reject);
      socket.on('close', () => {
        const status = Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0);
        resolve({ status, code: /"code":"(\w+)"/.exec(text)?.[1] });
      });
      socket.write(`POST /v1/timeouts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${TOKEN}\r\ncontent-type: application/json\r\n${headers}\r\n${bodyStart}`);
      // An answer that is not the end of the connection: close once it has come.
      socket.on('data', () => setTimeout(() => socket.end(), 50));
    });
  const slowBody = JSON.stringify({ ...one, bizId: 'bad-slow' });
  const slowClient = rawRequest(`content-length: ${slowBody.length}\r\n`, slowBody.slice(0, 5));
  const oversize = rawRequest(`content-length: ${BODY_LIMIT + 1}\r\n`, JSON.stringify({ ...one, bizId: 'bad-big', payload: 'x'.repeat(1000) }));
  const cases: Case[] = [
    { what: 'malformed JSON', status: 400, code: 'malformed_json', send: raw('{"kind": ') },
    { what: 'wrong type', status: 400, code: 'invalid_request', send: raw(JSON.stringify({ ...one, bizId: 1 })) },
    { what: 'unknown kind', status: 400, code: 'unknown_kind', send: raw(JSON.stringify({ ...one, kind: 'order.nope' })) },
    { what: 'year 10000', status: 400, code: 'invalid_request', send: raw(JSON.stringify({ kind: KIND, bizId: 'bad-2', dueAt: '10000-01-01T00:00:00Z' })) },
    { what: 'NUL in bizId', status: 400, code: 'invalid_request', send: raw(JSON.stringify({ ...one, bizId: 'bad-\u0000' })) },
    {
      what: 'lone surrogate in a payload',
      status: 400,
      code: 'invalid_request',
      send: raw(JSON.stringify({ ...one, bizId: 'bad-3', payload: { note: '\ud800' } })),
    },
    { what: 'over the size limit', status: 413, code: 'body_too_large', send: oversize },
    { what: 'no token', status: 401, code: 'unauthenticated', send: raw(JSON.stringify(one), { authorization: '' }) },
    { what: 'token of another kind', status: 403, code: 'forbidden', send: raw(JSON.stringify(one), { authorization: `Bearer ${OTHER_TOKEN}` }) },
    {
      what: 'batch over 5,000',
      status: 400,
      code: 'invalid_request',
      send: () => post('/v1/timeouts/batch', { timeouts: Array.from({ length: 5001 }, (_, i) => ({ ...one, bizId: `bad-b${i}` })) }).then(json),
    },
    { what: 'slow client', status: 408, code: 'request_timeout', send: slowClient },
  ];
  const wait = due.getTime() - Date.now();
  if (wait > 0) await sleep(wait);
  const burstStart = Date.now();
  const answers: Record<string, { sent: number; asDocumented: number; maxMs: number; wrong: string[] }> = {};
  for (const c of cases) answers[c.what] = { sent: 0, asDocumented: 0, maxMs: 0, wrong: [] };
  let draining = true;
  const sweep = (async () => {
    const slow = (async () => {
      while (draining) {
        const c = cases.at(-1)!;
        const t0 = Date.now();
        const a = await c.send();
        const rec = answers[c.what]!;
        rec.sent += 1;
        rec.maxMs = Math.max(rec.maxMs, Date.now() - t0);
        if (a.status === c.status && a.code === c.code) rec.asDocumented += 1;
        else rec.wrong.push(`${a.status} ${a.code}`);
      }
    })();
    while (draining) {
      for (const c of cases.slice(0, -1)) {
        const t0 = Date.now();
        const a = await c.send();
        const rec = answers[c.what]!;
        rec.sent += 1;
        rec.maxMs = Math.max(rec.maxMs, Date.now() - t0);
        if (a.status === c.status && a.code === c.code) rec.asDocumented += 1;
        else if (rec.wrong.length < 5) rec.wrong.push(`${a.status} ${a.code}`);
      }
    }
    await slow;
  })();
  for (;;) {
    const { rows: left } = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM timeout_center.timeouts WHERE kind = 'order.unpaid' AND state IN ('pending', 'dispatched') AND due_at <= now()",
    );
    if (left[0]!.n === 0) break;
    if (Date.now() - burstStart > 300_000) throw new Error('the burst did not drain in 5 minutes');
    await sleep(100);
  }
  const drainMs = Date.now() - burstStart;
  draining = false;
  await sweep;
  await sleep(1000);
  const written = (await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM timeout_center.all_timeouts WHERE biz_id LIKE 'bad-%'")).rows[0]!.n;
  const burst = await correctness(pool, 'ours');
  const allDocumented = Object.values(answers).every((a) => a.sent > 0 && a.asDocumented === a.sent);
  figures['sweep'] = { burst: N, drainMs, answers, badRowsWritten: written, burstCorrectness: burst, allDocumented };
  console.log('sweep', JSON.stringify(figures['sweep']));
  if (!allDocumented || written !== 0 || !burst.ok) process.exitCode = 1;
} finally {
  proc?.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 1500));
  proc?.kill('SIGKILL');
  await pool.end();
  await db.drop();
  if (args.out) writeFileSync(args.out, `${JSON.stringify(figures, null, 2)}\n`);
}
