// One soak run (test/soak/soak.ts parses the command line, then calls runSoak).
//
// Two coordinators and three workers as processes, restarted when they die, on the topology's
// servers (topology.ts). Each close counts itself (orders.closes), so a second effect shows. Steady
// arrivals of every kind with a flood every 30 s, payers at the due instant the README's way
// (cancel first, then the guarded UPDATE whose row count decides), reschedules. A nemesis acts
// every 3-6 s: SIGKILL a process, SIGSTOP one past its lease, terminate the center's backends, or
// one of the topology's own faults (Redis restarted empty or failed over, a business database or a
// store crashed and restarted). Then a drain, and the invariants in every database (check.ts).
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname } from 'node:path';
import pg from 'pg';
import { reschedule } from '../../dist/schedule.js';
import { writeConfig } from '../helpers/orders.ts';
import { killAll, runCli, spawnCli, type CliProcess, type LogLine } from '../helpers/processes.ts';
import { startPostgres, stopAllServers } from '../helpers/servers.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/services.ts';
import type { SoakArgs } from './args.ts';
import { check } from './check.ts';
import { LEASE_MS, log, pick, random, seedRandom, sleep, waitUntil, type Db, type Fault, type FaultResult } from './common.ts';
import { quietPool } from '../helpers/quiet-pool.ts';
import { setUp, type Payments, type SetUp } from './topology.ts';

type Role = 'coordinator' | 'worker';
const ROLES: { name: string; role: Role }[] = [
  { name: 'coordinator-1', role: 'coordinator' },
  { name: 'coordinator-2', role: 'coordinator' },
  { name: 'worker-1', role: 'worker' },
  { name: 'worker-2', role: 'worker' },
  { name: 'worker-3', role: 'worker' },
];

/** Runs the soak; resolves with the exit code (0: no violation, 1: a violation). */
export async function runSoak(args: SoakArgs): Promise<number> {
  seedRandom(args.seed);
  let center: TestDatabase | undefined;
  let centerDb: Db | undefined;
  let setup: SetUp | undefined;
  let running = true;
  // Stops exactly what this run started, once, whichever way it ends (done, error, Ctrl-C).
  let cleaning: Promise<void> | undefined;
  const cleanup = () =>
    (cleaning ??= (async () => {
      running = false;
      await killAll().catch(() => {});
      const pools = [centerDb?.pool.end(), setup?.close()].map((p) => Promise.resolve(p).catch(() => {}));
      await Promise.race([Promise.all(pools), sleep(5000)]);
      await stopAllServers().catch(() => {});
      await center?.drop().catch(() => {});
    })());
  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const) {
    process.once(signal, () => {
      log(`${signal}: stopping the fleet and the servers this run started`);
      void cleanup().finally(() => process.exit(code));
    });
  }
  // An error nothing caught ends the run, not before stopping what it started.
  for (const event of ['uncaughtException', 'unhandledRejection'] as const) {
    process.once(event, (err: unknown) => {
      console.error(`soak: ${event}:`, err);
      void cleanup().finally(() => process.exit(2));
    });
  }

  try {
    const load = { atStart: loadavg().map((x) => Math.round(x * 100) / 100), max1m: 0, sum1m: 0, samples: 0 };
    log(
      `topology ${args.topology}, ${args.minutes} min, seed ${args.seed}${args.twoPhase ? ', two-phase external runs' : ''}; load average ${load.atStart.join(' ')}`,
    );
    center = args.twoPhase ? await privateCenter() : await createTestDatabase('soak');
    centerDb = { name: 'center', pool: quietPool(center.url, 8) };
    setup = await setUp(args.topology, centerDb, center.url);
    const s = setup;
    log(`servers up: ${s.describe}`);
    const configPath = writeConfig(s.config);
    const env = { DATABASE_URL: center.url, TC_FAILPOINTS: undefined, LOG_LEVEL: 'warn', ...s.env };
    const migrated = await runCli(['migrate', '--config', configPath], env, 120_000);
    if (migrated.code !== 0) throw new Error(`migrate failed: ${migrated.stderr}`);

    // The fleet, each process restarted when it dies.
    const fleet = new Map<string, CliProcess>();
    const restarts: Record<string, number> = {};
    // A process that exits without the nemesis killing it is a finding: its exit, its stderr
    // and its last log lines go into the report.
    const nemesisKilled = new Set<number>();
    // Every line the fleet logged (warn and above: LOG_LEVEL), kept for the report.
    const fleetLines: { process: string; line: LogLine }[] = [];
    const ownExits: { process: string; at: string; afterMs: number; code: number | null; signal: string | null; stderr: string; lastLines: unknown[] }[] = [];
    const launch = (name: string, role: Role) => {
      const p = spawnCli(name, [role, '--config', configPath], env);
      const spawnedAt = Date.now();
      fleet.set(name, p);
      void p.exited.then(async ({ code, signal }) => {
        for (const l of p.lines) fleetLines.push({ process: name, line: l });
        if (!running) return;
        restarts[name] = (restarts[name] ?? 0) + 1;
        if (!nemesisKilled.has(p.pid)) {
          ownExits.push({
            process: name,
            at: new Date().toISOString(),
            afterMs: Date.now() - spawnedAt,
            code,
            signal,
            stderr: p.stderr.slice(-2000),
            lastLines: p.lines.slice(-8),
          });
          log(`${name} exited on its own (code ${code}, signal ${signal}): ${p.stderr.slice(-300).trim() || JSON.stringify(p.lines.at(-1))}`);
        }
        await sleep(500);
        if (running) launch(name, role);
      });
    };
    const launched = Date.now();
    for (const r of ROLES) launch(r.name, r.role);
    // Arrivals and the clock start once the fleet serves: every worker announced, every database
    // led (on a loaded box a process takes seconds to start, and that is no lateness of ours).
    const workers = ROLES.filter((r) => r.role === 'worker').length;
    await waitUntil(
      'the fleet up: every worker announced, the center and every store led',
      async () => {
        const live = await centerDb!.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM timeout_center.live_workers');
        const led = await Promise.all(
          s.timeoutsDbs.map(async (db) => (await db.pool.query('SELECT holder FROM timeout_center.coordinator_lease WHERE holder IS NOT NULL')).rowCount === 1),
        );
        return live.rows[0]!.n >= workers && led.every(Boolean);
      },
      120_000,
    );
    const started = Date.now();
    log(`fleet up after ${Math.round((started - launched) / 100) / 10} s`);

    const loops: Promise<void>[] = [];
    let loopErrors = 0;
    const every = (ms: number, fn: () => Promise<void>) =>
      loops.push(
        (async () => {
          while (running) {
            const t = Date.now();
            // A statement that meets a fault (a restart, a terminated session) is tried next round.
            await fn().catch((err: unknown) => {
              loopErrors += 1;
              if (loopErrors <= 5) log(`load statement failed (tried again next round): ${(err as Error).message}`);
            });
            await sleep(Math.max(0, ms - (Date.now() - t)));
          }
        })(),
      );

    // Arrivals: every 100 ms, 20 orders of each kind due in 1-3 s; every 30 s a flood of 1,500 of
    // each kind due at one instant. Each order's id is unique across every database.
    let nextId = 1;
    const arrive = async (n: number, dueSql: string) => {
      const batches = s.kinds.map((k) => {
        const from = nextId;
        nextId += n;
        return k.insert(from, n, dueSql);
      });
      const failed = (await Promise.allSettled(batches)).find((r) => r.status === 'rejected');
      if (failed) throw (failed as PromiseRejectedResult).reason;
    };
    every(100, () => arrive(20, `now() + (1 + random() * 2) * interval '1 second'`));
    every(30_000, async () => {
      await sleep(5000);
      if (running) await arrive(1500, `date_trunc('second', now()) + interval '3 seconds'`);
    });

    // Payers at the due instant, in every database that holds timeouts; 30 % of the orders (id % 10 < 3).
    const payments: Payments = { paid: 0, refused: 0, cancelled: 0, errors: 0 };
    const paidIds = new Set<number>();
    const payingNow = new Set<number>();
    const kinds = new Map(s.kinds.map((k) => [k.kind, k]));
    for (const db of s.timeoutsDbs) {
      every(50, async () => {
        const { rows } = await db.pool.query<{ kind: string; biz_id: string }>(
          `SELECT kind, biz_id FROM timeout_center.timeouts
            WHERE state IN ('pending', 'dispatched') AND due_at BETWEEN now() - interval '60 ms' AND now() + interval '60 ms'
              AND biz_id::bigint % 10 < 3 LIMIT 100`,
        );
        await Promise.all(
          rows.map(async (r) => {
            const id = Number(r.biz_id);
            if (payingNow.has(id) || paidIds.has(id)) return;
            payingNow.add(id);
            try {
              if (await kinds.get(r.kind)!.pay(id, payments)) {
                payments.paid += 1;
                paidIds.add(id);
              } else payments.refused += 1;
            } catch {
              payments.errors += 1; // a payer hit a restart: the customer retries (the next loop may)
            } finally {
              payingNow.delete(id);
            }
          }),
        );
      });
    }

    // Reschedules: a few pending timeouts moved 2 s later every second, in every database.
    let rescheduled = 0;
    for (const db of s.timeoutsDbs) {
      every(1000, async () => {
        const { rows } = await db.pool.query<{ kind: string; biz_id: string }>(
          `SELECT kind, biz_id FROM timeout_center.timeouts WHERE state = 'pending' AND due_at > now() + interval '500 ms' AND biz_id::bigint % 10 = 9 LIMIT 10`,
        );
        for (const r of rows) if (await reschedule(db.pool, r.kind, r.biz_id, { delayMs: 2000 })) rescheduled += 1;
      });
    }
    every(10_000, async () => {
      const l = loadavg()[0]!;
      load.max1m = Math.max(load.max1m, l);
      load.sum1m += l;
      load.samples += 1;
    });

    // The nemesis: every topology's process and center faults, plus the topology's own.
    const faults: Fault[] = [];
    const nemesisFailed: { action: string; at: string; error: string }[] = [];
    const generic: Record<string, (victim: [string, CliProcess]) => Promise<FaultResult>> = {
      kill: async ([name, p]) => {
        nemesisKilled.add(p.pid);
        p.kill('SIGKILL');
        return { type: 'SIGKILL', target: name, doneMs: Date.now(), endMs: Date.now() + LEASE_MS };
      },
      stop: async ([name, p]) => {
        const pid = p.pid;
        process.kill(pid, 'SIGSTOP');
        await sleep(2 * LEASE_MS);
        try {
          process.kill(pid, 'SIGCONT');
        } catch {
          // it died meanwhile
        }
        return { type: 'SIGSTOP past the lease', target: name, doneMs: Date.now(), endMs: Date.now() + LEASE_MS };
      },
      terminate: async () => {
        await centerDb!.pool.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE 'timeout-center%'`,
        );
        return { type: 'center backends terminated', doneMs: Date.now(), endMs: Date.now() + 2000 };
      },
    };
    const nemesis = (async () => {
      await sleep(5000);
      while (running && Date.now() - started < args.minutes * 60_000) {
        // The draw order (action, victim, pause) is the same as before topologies: a seed gives
        // the single topology the fault sequence it always gave.
        const action = pick(s.deck);
        const startMs = Date.now();
        const victim = pick([...fleet.entries()]);
        try {
          const own = s.faults[action];
          const result = own ? await own() : await generic[action]!(victim);
          if (result) {
            faults.push({ ...result, startMs });
            const d = result.detail ? ` ${JSON.stringify(result.detail)}` : '';
            log(`fault: ${result.type}${result.target ? ` (${result.target})` : ''}${d}`);
          }
        } catch (err) {
          nemesisFailed.push({ action, at: new Date(startMs).toISOString(), error: (err as Error).message });
          log(`nemesis ${action} failed: ${(err as Error).message}`);
        }
        await sleep(3000 + random() * 3000);
      }
    })();

    await sleep(args.minutes * 60_000);
    await nemesis;
    running = false;
    await Promise.all(loops);
    const arrivalsStoppedMs = Date.now();
    log(`arrivals stopped: ${faults.length} faults; draining`);
    for (const p of fleet.values()) {
      try {
        process.kill(p.pid, 'SIGCONT');
      } catch {
        // gone
      }
    }
    // Keep a full fleet for the drain (restarts were turned off with `running`).
    for (const r of ROLES) if (!fleet.get(r.name)?.alive) launch(r.name, r.role);
    const drainStarted = Date.now();
    for (;;) {
      const open = await Promise.all(s.timeoutsDbs.map((db) => openWork(db.pool).catch(() => ({ open: -1, scans: -1 }))));
      if (open.every((o) => o.open === 0 && o.scans === 0)) break;
      if (Date.now() - drainStarted > 300_000) {
        log(`drain not finished after 300 s: ${JSON.stringify(Object.fromEntries(open.map((o, i) => [s.timeoutsDbs[i]!.name, o])))}`);
        break;
      }
      await sleep(500);
    }
    const drainMs = Date.now() - drainStarted;
    await sleep(2000); // late statements of anything that was frozen
    await Promise.all([...fleet.values()].map((p) => p.stop(15_000)));

    const result = await check(s, faults, paidIds, arrivalsStoppedMs);
    await sleep(100); // the exit handlers have collected the last lines
    const orders = (
      await Promise.all(s.ordersDbs.map(async (db) => (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders')).rows[0]!.n))
    ).reduce((a, b) => a + b, 0);
    const round = (x: number) => Math.round(x * 100) / 100;
    const { timeouts, ...checked } = result;
    const report = {
      topology: args.topology,
      servers: s.describe,
      minutes: args.minutes,
      seed: args.seed,
      orders,
      timeouts,
      payments,
      rescheduled,
      loadStatementsFailed: loopErrors,
      faults: faults.length,
      faultsByType: faults.reduce<Record<string, number>>((acc, f) => ((acc[f.type] = (acc[f.type] ?? 0) + 1), acc), {}),
      nemesisFailed,
      processRestarts: restarts,
      ownExits,
      drainMs,
      loadAverage: {
        atStart: load.atStart,
        max1m: round(load.max1m),
        mean1m: load.samples ? round(load.sum1m / load.samples) : null,
        atEnd: loadavg().map(round),
      },
      ...checked,
      fleetLog: fleetLog(fleetLines, checked.closeGaps.perFault),
    };
    console.log(JSON.stringify(report, null, 2));
    if (args.out) {
      mkdirSync(dirname(args.out), { recursive: true });
      writeFileSync(args.out, JSON.stringify(report, null, 2));
    }
    printSummary(report);
    return Object.values(result.violations).some((v) => v.count > 0) ? 1 : 0;
  } finally {
    await cleanup();
  }
}

/** What the fleet logged: how often each message, and every line around the three longest gaps in
 *  closes (what the processes said while nothing closed). */
function fleetLog(lines: { process: string; line: LogLine }[], gaps: { gapMs: number; gapFrom: string; type: string }[]) {
  const timeOf = (l: LogLine) => (typeof l['time'] === 'number' ? l['time'] : Date.parse(String(l['time'])));
  const byMessage: Record<string, number> = {};
  for (const { line } of lines) byMessage[String(line.msg)] = (byMessage[String(line.msg)] ?? 0) + 1;
  const aroundLongestGaps = [...gaps]
    .sort((a, b) => b.gapMs - a.gapMs)
    .slice(0, 3)
    .map((g) => {
      const from = Date.parse(g.gapFrom);
      const near = lines.filter(({ line }) => timeOf(line) >= from - 2000 && timeOf(line) <= from + g.gapMs + 500);
      return {
        gap: `${g.gapMs} ms from ${g.gapFrom} (${g.type})`,
        lines: near
          .sort((a, b) => timeOf(a.line) - timeOf(b.line))
          .slice(0, 40)
          .map(({ process, line }) => ({
            process,
            time: new Date(timeOf(line)).toISOString(),
            level: line.level,
            msg: line.msg,
            ...(line['err'] ? { err: (line['err'] as { message?: string }).message } : {}),
            ...(line['store'] ? { store: line['store'] } : {}),
          })),
      };
    });
  return { byMessage: Object.fromEntries(Object.entries(byMessage).sort((a, b) => b[1] - a[1])), aroundLongestGaps };
}

async function openWork(pool: pg.Pool): Promise<{ open: number; scans: number }> {
  const { rows } = await pool.query<{ open: number; scans: number }>(
    `SELECT (SELECT count(*) FROM timeout_center.timeouts WHERE state NOT IN ('done', 'cancelled', 'failed'))::int AS open,
            (SELECT count(*) FROM timeout_center.scans WHERE state <> 'reduced')::int AS scans`,
  );
  return rows[0]!;
}

interface Summary {
  topology: string;
  minutes: number;
  seed: number;
  timeouts: number;
  closed: number;
  closedBy: Record<string, number>;
  failed: number;
  payments: Payments;
  faults: number;
  faultsByType: Record<string, number>;
  nemesisFailed: unknown[];
  ownExits: { process: string; afterMs: number; code: number | null; signal: string | null }[];
  violations: Record<string, { count: number; sample: string[] }>;
  lateness: { outsideFaults: number; p50Ms: number | null; p99Ms: number | null; maxMs: number | null };
  closeGaps: {
    byType: Record<string, { count: number; p50Ms: number; maxMs: number; closesResumedMaxMs?: number }>;
    worst: { type: string; target?: string; at: string; gapMs: number; gapDb: string } | undefined;
    quietMaxMs: number;
  };
  loadAverage: { max1m: number; mean1m: number | null };
  drainMs: number;
}

function printSummary(r: Summary): void {
  const n = (x: number) => x.toLocaleString('en-US');
  const bad = Object.entries(r.violations).filter(([, v]) => v.count > 0);
  const lines = [
    `soak summary: topology ${r.topology}, ${r.minutes} min, seed ${r.seed}; load average (1 min) mean ${r.loadAverage.mean1m}, max ${r.loadAverage.max1m}`,
    `  timeouts scheduled ${n(r.timeouts)}; orders closed ${n(r.closed)} (${Object.entries(r.closedBy)
      .map(([k, v]) => `${k} ${n(v)}`)
      .join(', ')}); paid ${n(r.payments.paid)}, refused ${n(r.payments.refused)}; failed for good ${r.failed}; drain ${r.drainMs} ms`,
    `  faults ${r.faults}: ${Object.entries(r.faultsByType)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${v} ${k}`)
      .join(', ')}${r.nemesisFailed.length ? `; ${r.nemesisFailed.length} nemesis actions failed (see nemesisFailed)` : ''}`,
    // Exit 3 is the CLI's "unavailable, nothing done": a process (re)started while Redis or a
    // database was down refuses to start, and its supervisor (here the soak) starts it again.
    `  processes that exited on their own (not killed by the nemesis): ${
      r.ownExits.length
        ? r.ownExits
            .map((e) => `${e.process} after ${Math.round(e.afterMs / 100) / 10} s (exit ${e.code ?? e.signal}${e.code === 3 ? ': unavailable at start' : ''})`)
            .join(', ')
        : 'none'
    }`,
    `  violations: ${bad.length === 0 ? '0 of every kind' : bad.map(([k, v]) => `${k}: ${v.count} (e.g. ${v.sample.slice(0, 3).join(', ')})`).join('; ')}`,
    `  lateness outside fault windows: p50 ${r.lateness.p50Ms} ms, p99 ${r.lateness.p99Ms} ms, max ${r.lateness.maxMs} ms (${n(r.lateness.outsideFaults)} timeouts)`,
    `  longest gap in a database's closes after a fault, by type (p50 / max):`,
    ...Object.entries(r.closeGaps.byType).map(
      ([k, v]) =>
        `    ${k}: ${n(v.p50Ms)} / ${n(v.maxMs)} ms (${v.count})${v.closesResumedMaxMs !== undefined ? `; closes resumed at most ${n(v.closesResumedMaxMs)} ms after the server answered again` : ''}`,
    ),
    `  longest: ${r.closeGaps.worst ? `${n(r.closeGaps.worst.gapMs)} ms (${r.closeGaps.worst.gapDb}) after ${r.closeGaps.worst.type}${r.closeGaps.worst.target ? ` (${r.closeGaps.worst.target})` : ''} at ${r.closeGaps.worst.at}` : 'none'}; longest gap away from any fault: ${n(r.closeGaps.quietMaxMs)} ms`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

/** --two-phase: the center's database on a private PostgreSQL that allows prepared transactions
 *  (stopped with the other servers the run started). */
async function privateCenter(): Promise<TestDatabase> {
  const server = await startPostgres({ settings: { max_prepared_transactions: '64' } });
  const admin = new pg.Pool({ connectionString: server.url(), max: 1 });
  await admin.query('CREATE DATABASE soak');
  await admin.end();
  return { name: 'soak', url: server.url('soak'), drop: async () => {} };
}
