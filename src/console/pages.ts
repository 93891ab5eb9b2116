// The console's pages: pure functions from data to HTML (server-rendered, no script needed).
// Every link and form action is prefixed with the base path, so the console can be mounted under
// a sub-path behind a proxy; every form post carries the CSRF token. The scans pages are in
// scan-pages.ts, the failed page in failed-page.ts, the stores' pieces in store-pages.ts.
import type { KindControls } from '../flow/kind-controls.js';
import type { TargetControls } from '../flow/target-controls.js';
import type { AuditEntry } from '../operations/audit.js';
import type { KindBacklog, Leader, LiveWorker, MinutePoint, OpenBreaker } from '../operations/overview.js';
import type { StoreOverview } from '../operations/stores-overview.js';
import type { TimeoutHistoryRow } from '../operations/timeouts.js';
import { formatBytes, type Warning, type WarningsReport } from '../operations/warnings.js';
import { lastHourChart } from './chart.js';
import { formatSeconds, formatTime, html, raw, type Html } from './html.js';
import { actionButton, csrfField, num, stateCell, type PageContext } from './parts.js';
import { inStore, scanPath, storeCell, storeHead, storesSection } from './store-pages.js';
import semver from 'semver';
import { PRE_RELEASE_CODE } from '../db/migrations.js';
import type { LiveProcess } from '../release/fleet.js';
import type { SchemaContract } from '../release/schema-contract.js';

export type { PageContext } from './parts.js';

const STYLE = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1a202c;background:#f7fafc}
header{background:#1a365d;color:#fff;padding:8px 20px;display:flex;gap:18px;align-items:center;flex-wrap:wrap}
header a{color:#e2e8f0;text-decoration:none}header a.on{color:#fff;font-weight:600;border-bottom:2px solid #90cdf4}
header .who{margin-left:auto;color:#a0aec0;font-size:12px}
main{padding:16px 20px;max-width:1280px}
h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;margin-bottom:8px}
th,td{border:1px solid #e2e8f0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#edf2f7;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.paused{background:#fefcbf;color:#744210;padding:1px 6px;border-radius:3px;font-size:12px;font-weight:600}
.state-failed,.critical{color:#c53030;font-weight:600}.state-done{color:#276749}.state-running{color:#2b6cb0}
.warning{color:#b7791f;font-weight:600}
.flash{padding:8px 12px;border-radius:4px;margin-bottom:12px}.flash.ok{background:#c6f6d5}.flash.err{background:#fed7d7}
.ro{background:#fefcbf;padding:6px 12px;margin-bottom:12px;border-radius:4px}
form.inline{display:inline}input,select,button{font:inherit;padding:2px 6px}
button{cursor:pointer}.err{color:#c53030;max-width:520px;word-break:break-word}
.card{background:#fff;border:1px solid #e2e8f0;padding:10px 14px;margin-bottom:12px;max-width:800px}
.muted{color:#718096}`;

const NAV: [string, string][] = [
  ['', 'Overview'],
  ['/kinds', 'Kinds'],
  ['/scans', 'Scans'],
  ['/timeouts', 'Timeouts'],
  ['/failed', 'Failed'],
  ['/warnings', 'Warnings'],
  ['/audit', 'Audit'],
];

export function layout(ctx: PageContext, current: string, title: string, body: Html): string {
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title} · timeout-center</title>
        <style>
          ${raw(STYLE)}
        </style>
      </head>
      <body>
        <header>
          <strong>timeout-center</strong>
          ${NAV.map(([path, label]) => html`<a href="${ctx.base}${path || '/'}" class="${path === current ? 'on' : ''}">${label}</a>`)}
          <span class="who">signed in as ${ctx.actor}${ctx.readOnly ? ' · read-only' : ''}</span>
        </header>
        <main>
          ${ctx.readOnly ? html`<div class="ro">Read-only console: actions are refused (started with --read-only).</div>` : ''}
          ${ctx.flash ? html`<div class="flash ${ctx.flash.ok ? 'ok' : 'err'}" role="status">${ctx.flash.text}</div>` : ''}
          <h1>${title}</h1>
          ${body}
        </main>
      </body>
    </html>`.text;
}

// Overview ----------------------------------------------------------------------------------------

export interface OverviewData {
  backlog: KindBacklog[];
  leader: Leader | null;
  workers: LiveWorker[];
  lastHour: MinutePoint[];
  breakers: OpenBreaker[];
  warnings: Warning[];
  /** With stores: each store's figures, or why it does not answer. */
  stores?: StoreOverview[] | undefined;
  /** The schema contract and the live processes with their versions (docs/upgrading.md). */
  release?: { console: string; contract: SchemaContract | null; processes: LiveProcess[] };
}

function versionsSection(d: OverviewData['release']): Html {
  if (!d) return html``;
  const c = d.contract;
  return html`<h2>Versions</h2>
    <p id="schema">
      ${
        c
          ? html`Schema: migration ${String(c.schemaVersion).padStart(4, '0')}${c.migratedBy ? ` (migrated by ${c.migratedBy})` : ''}, runs timeout-center
            ${c.oldestCode} and later · this console is ${d.console}`
          : 'Schema: missing'
      }
    </p>
    ${
      d.processes.length > 0
        ? html`<table id="processes">
            <tr>
              <th>process</th>
              <th>version</th>
              <th>host</th>
              <th>pid</th>
            </tr>
            ${d.processes.map(
              (p) =>
                html`<tr>
                  <td>${p.role}</td>
                  <td class="${c && semver.lt(p.version ?? PRE_RELEASE_CODE, c.oldestCode) ? 'critical' : ''}">${p.version ?? 'before 1.0.0'}</td>
                  <td>${p.host}</td>
                  <td class="n">${p.source === 'connections' ? `${p.connections} conn.` : (p.pid ?? '')}</td>
                </tr>`,
            )}
          </table>`
        : html`<p class="muted">no live process</p>`
    }`;
}

export function overviewPage(ctx: PageContext, d: OverviewData): string {
  const finished = d.lastHour.reduce((a, p) => a + p.finished, 0);
  const body = html` <h2>Backlog per kind</h2>
    <table id="backlog">
      <tr>
        <th>kind</th>
        <th>due waiting</th>
        <th>in flight</th>
        <th>oldest lag</th>
        <th>failed</th>
      </tr>
      ${d.backlog.map(
        (b) =>
          html`<tr data-kind="${b.kind}">
            <td><a href="${ctx.base}/kinds#${b.kind}">${b.kind}</a> ${b.paused ? html`<span class="paused">paused</span>` : ''}</td>
            ${num(b.pendingDue)}${num(b.inFlight)}
            <td class="n">${formatSeconds(b.oldestLagSeconds)}</td>
            <td class="n">${b.failed > 0 ? html`<a href="${ctx.base}/failed?kind=${encodeURIComponent(b.kind)}">${b.failed}</a>` : '0'}</td>
          </tr>`,
      )}
    </table>
    ${storesSection(ctx, d.stores)}
    <h2>Last hour: ${finished} timeouts finished</h2>
    <div class="card">${lastHourChart(d.lastHour)}</div>
    <h2>Leader</h2>
    <p id="leader">
      ${d.leader ? html`${d.leader.holder ?? '?'} · epoch ${d.leader.epoch} · since ${d.leader.acquiredAt}` : 'none elected yet (no coordinator has run against this database)'}
    </p>
    ${versionsSection(d.release)}
    <h2>Live workers: ${d.workers.length}</h2>
    ${
      d.workers.length > 0
        ? html`<table id="workers">
            <tr>
              <th>worker</th>
              <th>host</th>
              <th>pid</th>
              <th>kinds</th>
              <th>started</th>
              <th>last seen</th>
            </tr>
            ${d.workers.map(
              (w) =>
                html`<tr>
                  <td>${w.workerId}</td>
                  <td>${w.host}</td>
                  ${num(w.pid)}
                  <td>${w.kinds.join(', ')}</td>
                  <td>${w.startedAt}</td>
                  <td class="n">${formatSeconds(w.seenSecondsAgo)} ago</td>
                </tr>`,
            )}
          </table>`
        : html`<p class="muted">none seen in the last 15 s</p>`
    }
    <h2>Open circuit breakers: ${d.breakers.length}</h2>
    ${
      d.breakers.length > 0
        ? html`<table>
            <tr>
              <th>kind</th>
              <th>target</th>
              <th>worker</th>
              <th>state</th>
              <th>since</th>
            </tr>
            ${d.breakers.map(
              (b) =>
                html`<tr>
                  <td>${b.kind}</td>
                  <td>${b.target}</td>
                  <td>${b.worker}</td>
                  <td class="critical">${b.state}</td>
                  <td>${b.changedAt}</td>
                </tr>`,
            )}
          </table>`
        : html`<p class="muted">none</p>`
    }
    <h2>Warnings: ${d.warnings.length}</h2>
    ${warningList(d.warnings)}
    <p><a href="${ctx.base}/warnings">details</a></p>`;
  return layout(ctx, '', 'Overview', body);
}

function warningList(warnings: Warning[]): Html {
  if (warnings.length === 0) return html`<p class="muted">none</p>`;
  return html`<ul id="warnings">
    ${warnings.map((w) => html`<li class="${w.severity}">[${w.topic}] ${w.message}</li>`)}
  </ul>`;
}

// Kinds ---------------------------------------------------------------------------------------------

export interface KindRow extends KindControls {
  shardSize: number;
  maxAttempts: number;
  backoffMs: number;
  handlerType: string;
  description: string | null;
}

export function kindsPage(ctx: PageContext, kinds: KindRow[], databases: TargetControls[] = []): string {
  const back = '/kinds';
  const body = html` <p class="muted">
      Settings come from the config file; paused and the limits from the config too until changed here, with the CLI (<code
        >timeout-center pause | resume | limit</code
      >) or in SQL. A change applies fleet-wide within one tick and is audited.
    </p>
    <table id="kinds">
      <tr>
        <th>kind</th>
        <th>shard size</th>
        <th>max attempts</th>
        <th>backoff</th>
        <th>handler</th>
        <th>state</th>
        <th>running / queued shards</th>
        <th>max running shards</th>
        <th>rate limit (/s)</th>
        <th>set by</th>
        <th>actions</th>
      </tr>
      ${kinds.map(
        (k) =>
          html`<tr id="${k.kind}" data-kind="${k.kind}">
            <td><strong>${k.kind}</strong>${k.description ? html`<br /><span class="muted">${k.description}</span>` : ''}</td>
            ${num(k.shardSize)}${num(k.maxAttempts)}
            <td class="n">${formatSeconds(k.backoffMs / 1000)}</td>
            <td>${k.handlerType}</td>
            <td class="kind-state">${k.paused ? html`<span class="paused">paused</span>` : 'active'}</td>
            <td class="n">${k.runningShards} / ${k.queuedShards}</td>
            ${num(k.maxRunningShards)}${num(k.rateLimit)}
            <td>${k.source}${k.changedBy ? html`<br /><span class="muted">${k.changedBy}, ${k.changedAt}</span>` : ''}</td>
            <td>
              ${k.paused ? actionButton(ctx, `/actions/kinds/${encodeURIComponent(k.kind)}/resume`, 'Resume', back) : actionButton(ctx, `/actions/kinds/${encodeURIComponent(k.kind)}/pause`, 'Pause', back)}
              <form class="inline" method="post" action="${ctx.base}/actions/kinds/${encodeURIComponent(k.kind)}/limit">
                ${csrfField(ctx)}<input type="hidden" name="back" value="${back}" />
                <input name="maxRunningShards" size="4" placeholder="shards" value="${k.maxRunningShards ?? ''}" aria-label="max running shards" />
                <input name="rateLimit" size="6" placeholder="per s" value="${k.rateLimit ?? ''}" aria-label="rate limit" />
                <button type="submit">Set limits</button>
              </form>
            </td>
          </tr>`,
      )}
    </table>
    <p class="muted">Empty limit fields remove the limit.</p>
    ${databases.length === 0 ? '' : databasesTable(ctx, databases, back)}`;
  return layout(ctx, '/kinds', 'Kinds', body);
}

/** Business databases (sql/0009): the fleet-wide rate limit over all kinds that run there. */
function databasesTable(ctx: PageContext, databases: TargetControls[], back: string): Html {
  return html`<h2>Business databases</h2>
    <p class="muted">
      A database's rate limit holds over all kinds whose shards run against it, beside each kind's own limits (<code
        >timeout-center limit --database &lt;name&gt; --rate N|none|--reset</code
      >).
    </p>
    <table id="databases">
      <tr>
        <th>database</th>
        <th>kinds</th>
        <th>running / queued shards</th>
        <th>timeouts in flight</th>
        <th>rate limit (/s)</th>
        <th>config</th>
        <th>set by</th>
        <th>actions</th>
      </tr>
      ${databases.map(
        (d) =>
          html`<tr id="database-${d.target}" data-database="${d.target}">
            <td><strong>${d.target}</strong></td>
            <td>${d.kinds.join(', ')}</td>
            <td class="n">${d.runningShards} / ${d.queuedShards}</td>
            ${num(d.inFlightLimit)}${num(d.rateLimit)}${num(d.config.rateLimit)}
            <td>${d.source}${d.changedBy ? html`<br /><span class="muted">${d.changedBy}, ${d.changedAt}</span>` : ''}</td>
            <td>
              <form class="inline" method="post" action="${ctx.base}/actions/databases/${encodeURIComponent(d.target)}/limit">
                ${csrfField(ctx)}<input type="hidden" name="back" value="${back}" />
                <input name="rateLimit" size="6" placeholder="per s" value="${d.rateLimit ?? ''}" aria-label="rate limit of ${d.target}" />
                <button type="submit">Set limit</button>
              </form>
            </td>
          </tr>`,
      )}
    </table>`;
}

// Timeouts ------------------------------------------------------------------------------------------

export function timeoutsPage(
  ctx: PageContext,
  kinds: string[],
  query: { kind?: string | undefined; bizId?: string | undefined },
  rows: TimeoutHistoryRow[] | null,
  store?: string,
): string {
  const back = `/timeouts?kind=${encodeURIComponent(query.kind ?? '')}&bizId=${encodeURIComponent(query.bizId ?? '')}`;
  const live = rows?.find((r) => r.state === 'pending' || r.state === 'dispatched');
  const body = html` <form method="get" action="${ctx.base}/timeouts" id="find">
      <select name="kind" aria-label="kind">
        ${kinds.map((k) => html`<option value="${k}" ${k === query.kind ? raw('selected') : ''}>${k}</option>`)}
      </select>
      <input name="bizId" placeholder="business id, e.g. order 1042" value="${query.bizId ?? ''}" aria-label="business id" size="30" />
      <button type="submit">Find</button>
    </form>
    ${
      rows === null
        ? ''
        : rows.length === 0
          ? html`<p id="not-found">No timeout of ${query.kind} for ${query.bizId}: never scheduled, or purged by retention.</p>`
          : html`<h2>History of ${query.kind} ${query.bizId}${inStore(ctx, store)}</h2>
              <table id="history">
                <tr>
                  <th>timeout</th>
                  <th>state</th>
                  <th>due</th>
                  <th>available</th>
                  <th>attempts</th>
                  <th>shard</th>
                  <th>result</th>
                  <th>last error</th>
                  <th>created</th>
                  <th>finished</th>
                </tr>
                ${rows.map(
                  (t) =>
                    html`<tr data-timeout="${t.id}">
                      <td>${t.id}</td>
                      ${stateCell(t.state)}
                      <td>${t.dueAt}</td>
                      <td>${t.availableAt}</td>
                      ${num(t.attempts)}
                      <td>${t.shardId !== null ? html`<a href="${ctx.base}${scanPath(store, t.scanId ?? '')}">${t.shardId}</a>` : ''}</td>
                      <td>${t.result}</td>
                      <td class="err">${t.lastError}</td>
                      <td>${t.createdAt}</td>
                      <td>${t.finishedAt}</td>
                    </tr>`,
                )}
              </table>
              ${
                live
                  ? html`<div class="card">
                      <strong>Live timeout ${live.id}</strong> (${live.state}):
                      ${actionButton(ctx, '/actions/timeouts/cancel', 'Cancel', back, { kind: live.kind, bizId: live.bizId })}
                      ${
                        live.state === 'pending'
                          ? html`<form class="inline" method="post" action="${ctx.base}/actions/timeouts/reschedule">
                              ${csrfField(ctx)}<input type="hidden" name="back" value="${back}" /><input type="hidden" name="kind" value="${live.kind}" /><input
                                type="hidden"
                                name="bizId"
                                value="${live.bizId}"
                              />
                              new due time (UTC)
                              <input name="dueAt" placeholder="2026-11-23T08:00:00Z" value="${live.dueAt.toISOString()}" aria-label="new due time" /><button
                                type="submit"
                              >
                                Reschedule
                              </button>
                            </form>`
                          : html`<span class="muted">in flight: being applied now, cannot move</span>`
                      }
                    </div>`
                  : ''
              }`
    }`;
  return layout(ctx, '/timeouts', 'Timeouts', body);
}

// Warnings ------------------------------------------------------------------------------------------

export function warningsPage(ctx: PageContext, report: WarningsReport, lagSlaSeconds: number): string {
  const v = report.vacuum;
  const body = html` ${warningList(report.warnings)}
    <h2>Table and index size (bloat estimates)</h2>
    <table id="relations">
      <tr>
        <th>relation</th>
        <th>kind</th>
        <th>size</th>
        <th>live rows need (est.)</th>
        <th>dead or free (est.)</th>
      </tr>
      ${report.relations.map(
        (r) =>
          html`<tr>
            <td>${r.name}</td>
            <td>${r.kind}</td>
            <td class="n">${formatBytes(r.bytes)}</td>
            <td class="n">${r.expectedBytes === null ? 'not analyzed yet' : formatBytes(r.expectedBytes)}</td>
            <td class="n">${r.bloatRatio === null ? '-' : `${Math.round(r.bloatRatio * 100)} %`}</td>
          </tr>`,
      )}
    </table>
    <p class="muted">Estimates from pg_stats and reltuples (no pgstattuple); relations under 1 MB are not rated.</p>
    <h2>Autovacuum on timeouts</h2>
    ${
      v
        ? html`<table id="vacuum">
            <tr>
              <th>live tuples</th>
              <th>dead tuples</th>
              <th>autovacuum starts at</th>
              <th>last autovacuum</th>
              <th>last vacuum</th>
              <th>last autoanalyze</th>
              <th>autovacuums</th>
            </tr>
            <tr>
              ${num(v.liveTuples)}${num(v.deadTuples)}${num(v.autovacuumThreshold)}
              <td>${v.lastAutovacuum ?? 'never'}</td>
              <td>${v.lastVacuum ?? 'never'}</td>
              <td>${v.lastAutoanalyze ?? 'never'}</td>
              ${num(v.autovacuumCount)}
            </tr>
          </table>`
        : html`<p class="muted">no statistics yet</p>`
    }
    <h2>xmin horizon (oldest first)</h2>
    ${
      report.xmin.length > 0
        ? html`<table id="xmin">
            <tr>
              <th>held by</th>
              <th>name</th>
              <th>xid age</th>
              <th>open for</th>
            </tr>
            ${report.xmin.map(
              (x) =>
                html`<tr>
                  <td>${x.source}</td>
                  <td>${x.name}</td>
                  ${num(x.xidAge)}
                  <td class="n">${formatSeconds(x.seconds)}</td>
                </tr>`,
            )}
          </table>`
        : html`<p class="muted">nothing holds it back</p>`
    }
    <p class="muted">Lag SLA: ${lagSlaSeconds} s (alerts.lagSlaMs in the config, or --lag-sla).</p>`;
  return layout(ctx, '/warnings', 'Warnings', body);
}

// Audit -----------------------------------------------------------------------------------------------

export function auditPage(ctx: PageContext, entries: AuditEntry[]): string {
  // The store column: with stores, or when an entry came from a store.
  const c = ctx.stores || !entries.some((e) => e.store !== null) ? ctx : { ...ctx, stores: [] };
  const body = html`<table id="audit">
      <tr>
        <th>when</th>
        ${storeHead(c)}
        <th>who</th>
        <th>action</th>
        <th>kind</th>
        <th>target</th>
        <th>details</th>
      </tr>
      ${entries.map(
        (e) =>
          html`<tr data-action="${e.action}">
            <td>${formatTime(e.at)}</td>
            ${storeCell(c, e.store)}
            <td>${e.actor}</td>
            <td>${e.action}</td>
            <td>${e.kind}</td>
            <td>${e.target}</td>
            <td><code>${JSON.stringify(e.details)}</code></td>
          </tr>`,
      )}
    </table>
    ${entries.length === 0 ? html`<p class="muted">no operator action recorded yet</p>` : ''}`;
  return layout(ctx, '/audit', 'Audit log', body);
}

export function messagePage(ctx: PageContext, title: string, text: string): string {
  return layout(
    ctx,
    '',
    title,
    html`<p id="message">${text}</p>
      <p><a href="${ctx.base}/">back to the overview</a></p>`,
  );
}
