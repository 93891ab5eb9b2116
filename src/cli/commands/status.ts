// `timeout-center status`: the whole fleet on one screen, the summary first. With a config that
// names stores (-c or TIMEOUT_CENTER_CONFIG) it reads the center and every store (status-read.ts);
// a database that does not answer, or whose URL variable is unset, is named as a problem and the
// rest is shown. Exit 0 when nothing is wrong, 1 when it names a problem, 3 when no database
// answered at all (exit-codes.ts).
//
// The screen is a list of sections (SECTIONS below), each rendering the fleet or nothing; a new
// view (a layout line, the hosts of a pool) is one more entry, in text and in --json.
import type { Command } from 'commander';
import { describeControls, describeTargetControls, controlsJson, targetControlsJson } from './flow.js';
import {
  databaseOption,
  formatSeconds,
  formatTime,
  jsonOption,
  inputError,
  parseLimit,
  print,
  printJson,
  readConfig,
  table,
  unavailableError,
  type DbOptions,
} from './common.js';
import { partial } from '../exit-codes.js';
import { LIVE_WINDOW_S } from '../../operations/overview.js';
import { CENTER } from '../../stores/store-directory.js';
import { readFleet, type DatabaseAnswer, type DatabaseFigures, type Fleet, type ScanRow } from './status-read.js';
import { horizonSection, indent, versionsSection, type StatusSection } from './status-upkeep.js';

export { LIVE_WINDOW_S };
export type { ScanRow };

export type { StatusSection } from './status-upkeep.js';

export function registerStatus(program: Command): void {
  program
    .command('status')
    .description(
      'the whole fleet, the summary first: each database (the center and, with a config, every store) with its backlog, oldest lag, failed, ' +
        `last scan, leader and live workers (seen in the last ${LIVE_WINDOW_S} s), then what is wrong with what to do, then the details; exit 1 when something is wrong`,
    )
    .addOption(databaseOption())
    .addOption(jsonOption())
    .option('--scans <n>', 'how many recent scans to show (per database, merged newest first)', (v) => parseLimit(v, '--scans'), 5)
    .action(async (opts: DbOptions & { json?: boolean; scans: number }) => {
      const config = readConfig(opts);
      const centerUrl = opts.databaseUrl ?? config?.databaseUrl;
      if (!centerUrl) {
        throw inputError(
          'DATABASE_URL is not set: set it (e.g. DATABASE_URL=postgres://user@127.0.0.1:5432/app), pass --database-url, or give a config with databaseUrl',
        );
      }
      const fleet = await readFleet({ centerUrl, config, scans: opts.scans });
      if (fleet.databases.every((d) => !d.ok)) {
        // Nothing to show: no database answered (exit 3; 2 when every one is only an unset variable).
        const why = fleet.databases.map((d) => `${d.store}: ${d.ok ? '' : d.error}`).join('; ');
        if (fleet.databases.every((d) => !d.ok && d.unsetVariable)) throw inputError(why);
        throw unavailableError(
          `cannot reach PostgreSQL: ${why}. Is the server running and DATABASE_URL right? (run \`timeout-center migrate\` if the schema is missing)`,
        );
      }
      if (fleet.problems.length > 0) partial();
      if (opts.json) printJson(Object.assign({}, ...SECTIONS.map((s) => s.json(fleet))));
      else
        print(
          SECTIONS.map((s) => s.text(fleet))
            .filter((t): t is string => t !== undefined)
            .join('\n\n'),
        );
    });
}

// The figures, over the databases that answered ----------------------------------------------------

const answered = (fleet: Fleet): (DatabaseAnswer & { ok: true; value: DatabaseFigures })[] =>
  fleet.databases.filter((d): d is DatabaseAnswer & { ok: true; value: DatabaseFigures } => d.ok);

const center = (fleet: Fleet): DatabaseFigures | undefined => answered(fleet).find((d) => d.store === CENTER)?.value;

function totalsOf(figures: DatabaseFigures[]) {
  return {
    pendingDue: figures.reduce((n, f) => n + f.backlog.reduce((a, b) => a + b.pendingDue, 0), 0),
    inFlight: figures.reduce((n, f) => n + f.backlog.reduce((a, b) => a + b.inFlight, 0), 0),
    oldestLagSeconds: figures
      .flatMap((f) => f.backlog.map((b) => b.oldestLagSeconds))
      .reduce<number | null>((a, b) => (b !== null && (a === null || b > a) ? b : a), null),
    failed: figures.reduce((n, f) => n + f.failed.reduce((a, b) => a + b.count, 0), 0),
  };
}

/** Live workers over the fleet: a worker process serving several stores heartbeats in each. */
function workersOf(fleet: Fleet) {
  const byId = new Map<string, DatabaseFigures['workers'][number] & { stores: string[] }>();
  for (const d of answered(fleet)) {
    for (const w of d.value.workers) {
      const seen = byId.get(w.workerId);
      if (seen) {
        seen.stores.push(d.store);
        if (w.seenSecondsAgo < seen.seenSecondsAgo) seen.seenSecondsAgo = w.seenSecondsAgo;
      } else byId.set(w.workerId, { ...w, stores: [d.store] });
    }
  }
  return [...byId.values()].sort((a, b) => a.workerId.localeCompare(b.workerId));
}

function scansOf(fleet: Fleet, limit: number): (ScanRow & { store?: string })[] {
  const rows = answered(fleet).flatMap((d) => d.value.scans.map((s) => (fleet.multi ? { ...s, store: d.store } : s)));
  return rows.sort((a, b) => b.started_at.getTime() - a.started_at.getTime()).slice(0, limit);
}

function lastScan(f: DatabaseFigures): string | null {
  const s = f.scans[0];
  if (!s) return 'none yet';
  const ago = (f.now.getTime() - s.started_at.getTime()) / 1000;
  return `#${s.scan_id} ${s.state}, ${formatSeconds(ago)} ago`;
}

const leaderText = (l: DatabaseFigures['leader']) => (l ? `${l.holder ?? '?'} (epoch ${l.epoch})` : 'none yet');

// The sections, in order ---------------------------------------------------------------------------

const fleetSection: StatusSection = {
  name: 'fleet',
  text(fleet) {
    const ok = answered(fleet);
    const t = totalsOf(ok.map((d) => d.value));
    const names = fleet.databases.map((d) => d.store);
    const head =
      fleet.problems.length === 0
        ? `Fleet: OK (${names.length === 1 ? 'the center answers' : `the center and ${names.length - 1} store${names.length === 2 ? '' : 's'} answer`}; nothing wrong)`
        : `Fleet: ${fleet.problems.length} PROBLEM${fleet.problems.length === 1 ? '' : 'S'} (exit 1)`;
    const rows = fleet.databases.map((d) => ({ d, f: d.ok ? d.value : undefined }));
    const lines = [
      head,
      ...fleet.problems.map((p) => `  - ${p.message}`),
      indent(
        table(rows, [
          { header: 'database', value: (r) => r.d.store },
          {
            header: 'due waiting',
            value: (r) => (r.f ? r.f.backlog.reduce((a, b) => a + b.pendingDue, 0) : r.d.ok ? null : r.d.unsetVariable ? 'NOT SET' : 'UNREACHABLE'),
            align: 'right',
          },
          { header: 'in flight', value: (r) => (r.f ? r.f.backlog.reduce((a, b) => a + b.inFlight, 0) : null), align: 'right' },
          { header: 'oldest lag', value: (r) => (r.f ? formatSeconds(totalsOf([r.f]).oldestLagSeconds) : null), align: 'right' },
          { header: 'failed', value: (r) => (r.f ? totalsOf([r.f]).failed : null), align: 'right' },
          { header: 'last scan', value: (r) => (r.f ? lastScan(r.f) : null) },
          { header: 'leader', value: (r) => (r.f ? leaderText(r.f.leader) : null), max: 40 },
          { header: 'live workers', value: (r) => (r.f ? r.f.workers.length : null), align: 'right' },
        ]),
      ),
    ];
    if (fleet.multi) {
      lines.push(
        `  all: ${t.pendingDue} due and waiting, ${t.inFlight} in flight, oldest lag ${formatSeconds(t.oldestLagSeconds) ?? '-'}, ${t.failed} failed, ${workersOf(fleet).length} live workers`,
      );
    }
    return lines.join('\n');
  },
  json(fleet) {
    const row = (d: DatabaseAnswer) =>
      d.ok
        ? {
            store: d.store,
            kinds: d.kinds,
            reachable: true,
            ...totalsOf([d.value]),
            lastScan: d.value.scans[0] ? scanJson(d.value.scans[0]) : null,
            leader: d.value.leader,
            liveWorkers: d.value.workers.length,
          }
        : { store: d.store, kinds: d.kinds, reachable: false, error: d.error, ...(d.unsetVariable ? { unsetVariable: d.unsetVariable } : {}) };
    return {
      ok: fleet.problems.length === 0,
      problems: fleet.problems,
      now: center(fleet)?.now ?? answered(fleet)[0]?.value.now ?? null,
      fleet: fleet.databases.map(row),
      // The stores alone (without the center), as before.
      stores: fleet.databases.filter((d) => d.store !== CENTER).map(row),
      totals: totalsOf(answered(fleet).map((d) => d.value)),
    };
  },
};

const backlogSection: StatusSection = {
  name: 'backlog',
  text(fleet) {
    const t = totalsOf(answered(fleet).map((d) => d.value));
    const rows = answered(fleet).flatMap((d) => d.value.backlog.map((b) => ({ store: d.store, ...b })));
    const unserved = new Set(fleet.unserved.map((u) => `${u.store}/${u.kind}`));
    const out = [`Backlog: ${t.pendingDue} due and waiting, ${t.inFlight} in flight, oldest lag ${formatSeconds(t.oldestLagSeconds) ?? '-'}`];
    if (rows.length > 0) {
      out.push(
        indent(
          table(rows, [
            ...(fleet.multi ? [{ header: 'database', value: (b: (typeof rows)[number]) => b.store }] : []),
            { header: 'kind', value: (b) => b.kind },
            { header: 'due waiting', value: (b) => b.pendingDue },
            { header: 'in flight', value: (b) => b.inFlight },
            { header: 'oldest lag', value: (b) => formatSeconds(b.oldestLagSeconds), align: 'right' },
            { header: 'flow', value: (b) => (b.paused ? 'PAUSED' : unserved.has(`${b.store}/${b.kind}`) ? 'NO WORKER' : null) },
          ]),
        ),
      );
    }
    return out.join('\n');
  },
  json(fleet) {
    return {
      backlog: answered(fleet).flatMap((d) => d.value.backlog.map((b) => ({ ...(fleet.multi ? { store: d.store } : {}), ...b }))),
      unservedKinds: [...new Set(fleet.unserved.map((u) => u.kind))],
    };
  },
};

const flowSection: StatusSection = {
  name: 'flow',
  text(fleet) {
    const c = center(fleet);
    if (!c) return undefined;
    const controlled = (c.controls ?? []).filter((k) => k.paused || k.maxRunningShards !== null || k.rateLimit !== null || k.source === 'operator');
    const targets = (c.targets ?? []).filter((t) => t.rateLimit !== null || t.source === 'operator');
    if (controlled.length === 0 && targets.length === 0) return 'Flow control: no kind paused or limited';
    return `Flow control:\n${indent([...controlled.map(describeControls), ...targets.map(describeTargetControls)].join('\n'))}`;
  },
  json(fleet) {
    const c = center(fleet);
    return { kinds: (c?.controls ?? []).map(controlsJson), databases: (c?.targets ?? []).map(targetControlsJson) };
  },
};

const leaderSection: StatusSection = {
  name: 'leader',
  text(fleet) {
    const line = (l: DatabaseFigures['leader']) =>
      l
        ? `${l.holder ?? '?'} (epoch ${l.epoch}, since ${formatTime(l.acquiredAt)})`
        : 'none has been elected yet (no coordinator has run against this database)';
    if (!fleet.multi) {
      const c = center(fleet);
      return c ? `Leader: ${line(c.leader)}; each coordinator's /readyz says whether it leads now` : undefined;
    }
    return [
      "Leaders (each database is led on its own; each coordinator's /readyz says whether it leads now):",
      ...answered(fleet).map((d) => `  ${d.store}: ${line(d.value.leader)}`),
    ].join('\n');
  },
  json(fleet) {
    return {
      leader: center(fleet)?.leader ?? null,
      leaders: Object.fromEntries(answered(fleet).map((d) => [d.store, d.value.leader])),
    };
  },
};

const redisSection: StatusSection = {
  name: 'redis',
  text(fleet) {
    const probe = fleet.redis;
    if (!probe) return 'Redis: not checked (pass -c <file> or set TIMEOUT_CENTER_CONFIG)';
    if (!('mode' in probe)) return `Redis: not checked: ${probe.error}`;
    const head = `Redis: ${probe.mode}, ${probe.target}`;
    if (probe.error) return `${head}: UNREACHABLE (${probe.error})`;
    const streams = probe.streams.map((s) => `  ${s.kind}: ${s.key} on ${s.node}${s.slot === undefined ? '' : ` (slot ${s.slot})`}`);
    return [`${head}, reaching ${probe.nodes.join(', ')}`, ...streams].join('\n');
  },
  json(fleet) {
    return { redis: fleet.redis ?? null };
  },
};

const workersSection: StatusSection = {
  name: 'workers',
  text(fleet) {
    const workers = workersOf(fleet);
    const out = [`Live workers: ${workers.length}`];
    for (const u of fleet.unserved) {
      out.push(
        `  No live worker serves ${u.kind}${fleet.multi ? ` in ${u.store}` : ''}: its timeouts wait (one shard at most) while the other kinds go on. Start a worker with it in worker.kinds, or pause it.`,
      );
    }
    if (workers.length > 0) {
      out.push(
        indent(
          table(workers, [
            { header: 'worker', value: (w) => w.workerId },
            { header: 'host', value: (w) => w.host },
            { header: 'pid', value: (w) => w.pid },
            { header: 'kinds', value: (w) => w.kinds.join(','), max: 40 },
            ...(fleet.multi ? [{ header: 'databases', value: (w: (typeof workers)[number]) => w.stores.join(','), max: 40 }] : []),
            { header: 'last seen', value: (w) => `${formatSeconds(w.seenSecondsAgo)} ago`, align: 'right' },
          ]),
        ),
      );
    }
    return out.join('\n');
  },
  json(fleet) {
    return {
      liveWorkers: workersOf(fleet).map((w) => ({
        workerId: w.workerId,
        host: w.host,
        pid: w.pid,
        kinds: w.kinds,
        startedAt: w.startedAt,
        lastSeenAt: w.lastSeenAt,
        ...(fleet.multi ? { stores: w.stores } : {}),
      })),
    };
  },
};

const failedSection: StatusSection = {
  name: 'failed',
  text(fleet) {
    const rows = answered(fleet).flatMap((d) => d.value.failed.map((f) => ({ store: d.store, ...f })));
    const total = rows.reduce((n, r) => n + r.count, 0);
    if (total === 0) return 'Failed timeouts: 0';
    const parts = rows.map((r) => `${fleet.multi ? `${r.store} ` : ''}${r.kind} ${r.count}`).join(', ');
    return `Failed timeouts: ${total} (${parts}): see \`timeout-center failed\`, then \`timeout-center retry\``;
  },
  json(fleet) {
    const failed: Record<string, number> = {};
    for (const d of answered(fleet)) for (const f of d.value.failed) failed[f.kind] = (failed[f.kind] ?? 0) + f.count;
    return { failed };
  },
};

const breakersSection: StatusSection = {
  name: 'breakers',
  text(fleet) {
    const breakers = answered(fleet).flatMap((d) => d.value.breakers.map((b) => ({ store: d.store, ...b })));
    const out = [`Circuit breakers not closed: ${breakers.length}`];
    if (breakers.length > 0) {
      out.push(
        indent(
          table(breakers, [
            ...(fleet.multi ? [{ header: 'database', value: (b: (typeof breakers)[number]) => b.store }] : []),
            { header: 'kind', value: (b) => b.kind },
            { header: 'target', value: (b) => b.target },
            { header: 'worker', value: (b) => b.worker },
            { header: 'state', value: (b) => b.state },
            { header: 'for', value: (b) => formatSeconds(b.forSeconds), align: 'right' },
            { header: 'last error', value: (b) => b.lastError ?? '', max: 60 },
          ]),
        ),
      );
    }
    return out.join('\n');
  },
  json(fleet) {
    return {
      openBreakers: answered(fleet).flatMap((d) =>
        d.value.breakers.map((b) => ({
          ...(fleet.multi ? { store: d.store } : {}),
          kind: b.kind,
          target: b.target,
          worker: b.worker,
          state: b.state,
          since: b.changedAt,
          lastError: b.lastError,
        })),
      ),
    };
  },
};

const scansSection: StatusSection = {
  name: 'scans',
  text(fleet) {
    const scans = scansOf(fleet, fleet.scanLimit);
    if (scans.length === 0) return 'Last scans: none yet';
    return `Last scans${fleet.multi ? ' (every database, newest first; scan ids are per database)' : ''}:\n${indent(scanTable(scans))}`;
  },
  json(fleet) {
    return { scans: scansOf(fleet, fleet.scanLimit).map((s) => ({ ...(s.store !== undefined ? { store: s.store } : {}), ...scanJson(s) })) };
  },
};

/** Which host each database's connection string reached (a multi-host string: its primary now). */
const postgresSection: StatusSection = {
  name: 'postgres',
  text(fleet) {
    const rows = answered(fleet).filter((d) => d.value.postgres);
    if (rows.length === 0) return undefined;
    return rows.map((d) => `PostgreSQL${fleet.multi ? ` ${d.store}` : ''}: ${d.value.postgres!.host ?? '-'} (of ${d.value.postgres!.target})`).join('\n');
  },
  json(fleet) {
    return {
      postgres: center(fleet)?.postgres ?? null,
      ...(fleet.multi ? { postgresByStore: Object.fromEntries(answered(fleet).map((d) => [d.store, d.value.postgres])) } : {}),
    };
  },
};

/** The status screen, in order. The summary comes first; add a section here for a new view. */
// The database's layout (plain, or Citus with its worker nodes: docs/scale.md "Citus: what runs").
const layoutSection: StatusSection = {
  name: 'layout',
  text(fleet) {
    const lines = fleet.databases.flatMap((d) => (d.ok && d.value.layout ? [`${fleet.multi ? `${d.store}: ` : ''}${d.value.layout.description}`] : []));
    return lines.length ? `Layout: ${lines.join('\n  ')}` : undefined;
  },
  json(fleet) {
    const d = fleet.databases[0];
    return { layout: d?.ok ? (d.value.layout ?? null) : null };
  },
};

export const SECTIONS: StatusSection[] = [
  fleetSection,
  postgresSection,
  backlogSection,
  flowSection,
  leaderSection,
  redisSection,
  layoutSection,
  versionsSection,
  workersSection,
  failedSection,
  breakersSection,
  horizonSection,
  scansSection,
];

/** A scan as --json prints it (status and scans). */
export function scanJson(s: ScanRow) {
  return {
    scanId: s.scan_id,
    state: s.state,
    claimed: s.claimed,
    shards: s.shard_count,
    done: s.done,
    skipped: s.skipped,
    failed: s.failed,
    retried: s.retried,
    startedAt: s.started_at,
    reducedAt: s.reduced_at,
    durationSeconds: s.duration_s,
    epoch: Number(s.epoch),
  };
}

/** The scans as a table; with a `store` on each row (several stores read), a STORE column first. */
export function scanTable(scans: (ScanRow & { store?: string })[]): string {
  const storeColumn = scans.some((s) => s.store !== undefined) ? [{ header: 'store', value: (s: ScanRow & { store?: string }) => s.store }] : [];
  return table(scans, [
    ...storeColumn,
    { header: 'scan', value: (s) => s.scan_id },
    { header: 'state', value: (s) => s.state },
    { header: 'claimed', value: (s) => s.claimed },
    { header: 'shards', value: (s) => s.shard_count },
    { header: 'done', value: (s) => s.done },
    { header: 'skipped', value: (s) => s.skipped },
    { header: 'failed', value: (s) => s.failed },
    { header: 'retried', value: (s) => s.retried },
    { header: 'started', value: (s) => formatTime(s.started_at) },
    { header: 'duration', value: (s) => formatSeconds(s.duration_s), align: 'right' },
    { header: 'epoch', value: (s) => Number(s.epoch) },
  ]);
}
