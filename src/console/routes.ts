// The console's route table: each page (GET, as HTML or as JSON under /api) and each action (POST,
// a form under /actions or JSON under /api) is one entry, a path pattern and a thin handler over
// src/operations/. What a route reads or does lives there; this file only parses and words it.
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Database } from '../db/schema.js';
import { listAudit } from '../operations/audit.js';
import {
  cancelAudited,
  kindNames,
  kindSettings,
  listKindControls,
  listTargetControls,
  pauseKind,
  rerunShard,
  rescheduleAudited,
  resumeKind,
  retryAudited,
  retryEveryFailed,
  setKindLimits,
  setTargetRateLimit,
} from '../operations/actions.js';
import { kindBacklog, lastHour, leader, liveWorkers, openBreakers, type MinutePoint } from '../operations/overview.js';
import type { RetrySelector } from '../operations/retry.js';
import { getScan, listScans } from '../operations/scans.js';
import { listFailed, timeoutHistory } from '../operations/timeouts.js';
import { collectWarnings } from '../operations/warnings.js';
import { failedFilter, HttpError, limitValue, many, one, positiveId, type ConsoleRequest } from './http.js';
import { auditPage, failedPage, kindsPage, overviewPage, scanPage, scansPage, timeoutsPage, warningsPage, type KindRow, type PageContext } from './pages.js';

export interface RouteDeps {
  pool: pg.Pool;
  db: Kysely<Database>;
  lagSlaSeconds: number;
}

export interface PageRoute {
  path: RegExp;
  read(r: ConsoleRequest, ctx: PageContext, match: RegExpExecArray): Promise<{ json: unknown; page: () => string }>;
}

export interface ActionRoute {
  path: RegExp;
  /** What it did, as JSON and as one line for the page. */
  act(r: ConsoleRequest, match: RegExpExecArray): Promise<{ json: unknown; text: string }>;
}

/** The first route whose pattern matches the path, with its match. */
export function findRoute<T extends { path: RegExp }>(routes: T[], path: string): [T, RegExpExecArray] | undefined {
  for (const route of routes) {
    const m = route.path.exec(path);
    if (m) return [route, m];
  }
  return undefined;
}

const param = (m: RegExpExecArray) => decodeURIComponent(m[1]!);

export function pageRoutes({ pool, lagSlaSeconds }: RouteDeps): PageRoute[] {
  const kindRows = async (): Promise<KindRow[]> => {
    const [controls, settings] = await Promise.all([listKindControls(pool), kindSettings(pool)]);
    const byKind = new Map(settings.map((r) => [r.kind, r]));
    return controls.map((c) => ({ ...c, ...byKind.get(c.kind)! }));
  };
  // The chart reads an hour of finished timeouts (millions under a flood): computed at most once
  // per 10 s whatever the number of open overview pages.
  let hourCache: { at: number; points: Promise<MinutePoint[]> } | undefined;
  const lastHourCached = () => {
    if (!hourCache || Date.now() - hourCache.at > 10_000) {
      const points = lastHour(pool);
      hourCache = { at: Date.now(), points };
      points.catch(() => (hourCache = undefined));
    }
    return hourCache.points;
  };
  const kindsAndDatabases = () => Promise.all([kindRows(), listTargetControls(pool)]);

  return [
    {
      path: /^(?:\/|\/overview)?$/,
      async read(_r, ctx) {
        const [backlog, lead, workers, hour, breakers, warnings] = await Promise.all([
          kindBacklog(pool),
          leader(pool),
          liveWorkers(pool),
          lastHourCached(),
          openBreakers(pool),
          collectWarnings(pool, { lagSlaSeconds }),
        ]);
        const d = { backlog, leader: lead, workers, lastHour: hour, breakers, warnings: warnings.warnings };
        return { json: d, page: () => overviewPage(ctx, d) };
      },
    },
    {
      path: /^\/kinds$/,
      async read(_r, ctx) {
        const [kinds, databases] = await kindsAndDatabases();
        return { json: kinds, page: () => kindsPage(ctx, kinds, databases) };
      },
    },
    {
      // Business databases and their fleet-wide rate limits (shown on the kinds page).
      path: /^\/databases$/,
      async read(_r, ctx) {
        const [kinds, databases] = await kindsAndDatabases();
        return { json: databases, page: () => kindsPage(ctx, kinds, databases) };
      },
    },
    {
      path: /^\/scans$/,
      async read(r, ctx) {
        const limitText = r.query.get('limit');
        const limit = limitText ? Math.min(positiveId(limitText, 'limit'), 1000) : 50;
        const scans = await listScans(pool, { limit, kind: r.query.get('kind') || undefined });
        return { json: scans, page: () => scansPage(ctx, scans) };
      },
    },
    {
      path: /^\/scans\/([^/]+)$/,
      async read(_r, ctx, m) {
        const scanId = positiveId(param(m), 'scan id');
        const found = await getScan(pool, scanId);
        if (!found) throw new HttpError(404, `scan ${scanId} does not exist (never created, or purged by retention)`);
        return { json: found, page: () => scanPage(ctx, found.scan, found.shards) };
      },
    },
    {
      path: /^\/timeouts$/,
      async read(r, ctx) {
        const kind = r.query.get('kind') || undefined;
        const bizId = r.query.get('bizId')?.trim() || undefined;
        const kinds = await kindNames(pool);
        const rows = kind && bizId ? await timeoutHistory(pool, kind, bizId) : null;
        return { json: rows ?? [], page: () => timeoutsPage(ctx, kinds, { kind, bizId }, rows) };
      },
    },
    {
      path: /^\/failed$/,
      async read(r, ctx) {
        const filter = failedFilter(r.query);
        const [kinds, found] = await Promise.all([kindNames(pool), listFailed(pool, filter, 200)]);
        return { json: found, page: () => failedPage(ctx, kinds, filter, found.total, found.rows) };
      },
    },
    {
      path: /^\/warnings$/,
      async read(_r, ctx) {
        const report = await collectWarnings(pool, { lagSlaSeconds });
        return { json: report, page: () => warningsPage(ctx, report, lagSlaSeconds) };
      },
    },
    {
      path: /^\/audit$/,
      async read(r, ctx) {
        const entries = await listAudit(pool, { limit: 200, kind: r.query.get('kind') || undefined, action: r.query.get('action') || undefined });
        return { json: entries, page: () => auditPage(ctx, entries) };
      },
    },
  ];
}

export function actionRoutes({ pool, db }: RouteDeps): ActionRoute[] {
  const timeoutOf = (r: ConsoleRequest) => {
    const kind = one(r.body, 'kind') ?? '';
    const bizId = one(r.body, 'bizId')?.trim() ?? '';
    if (!kind || !bizId) throw new HttpError(400, 'give a kind and a business id (bizId)');
    return { kind, bizId };
  };
  return [
    {
      path: /^\/kinds\/([^/]+)\/pause$/,
      act: async (r, m) => ({ json: await pauseKind(pool, param(m), r.actor), text: `paused ${param(m)}: nothing of it starts until it is resumed` }),
    },
    {
      path: /^\/kinds\/([^/]+)\/resume$/,
      act: async (r, m) => ({ json: await resumeKind(pool, param(m), r.actor), text: `resumed ${param(m)}` }),
    },
    {
      path: /^\/kinds\/([^/]+)\/limit$/,
      async act(r, m) {
        const kind = param(m);
        const change = { maxRunningShards: limitValue(one(r.body, 'maxRunningShards')), rateLimit: limitValue(one(r.body, 'rateLimit')) };
        const controls = await setKindLimits(pool, kind, change, r.actor);
        return {
          json: controls,
          text: `${kind}: at most ${controls.maxRunningShards ?? 'any number of'} running shards, ${controls.rateLimit === null ? 'no rate limit' : `${controls.rateLimit} timeouts/s`}`,
        };
      },
    },
    {
      path: /^\/databases\/([^/]+)\/limit$/,
      async act(r, m) {
        const target = param(m);
        const rate = limitValue(one(r.body, 'rateLimit'));
        if (rate === undefined) throw new HttpError(400, 'give rateLimit: timeouts per second, or empty for no limit');
        const controls = await setTargetRateLimit(pool, target, rate, r.actor);
        return {
          json: controls,
          text: `database ${target}: ${controls.rateLimit === null ? 'no rate limit' : `at most ${controls.rateLimit} timeouts/s over all its kinds`}`,
        };
      },
    },
    {
      path: /^\/shards\/([^/]+)\/rerun$/,
      async act(r, m) {
        const shardId = positiveId(param(m), 'shard id');
        const result = await rerunShard(db, shardId, r.actor);
        return {
          json: result,
          text: `shard ${shardId}: ${result.retried} failed timeout(s) back to pending${result.left ? `, ${result.left} left alone (a live timeout exists for the object)` : ''}`,
        };
      },
    },
    {
      path: /^\/timeouts\/cancel$/,
      async act(r) {
        const { kind, bizId } = timeoutOf(r);
        if (!(await cancelAudited(db, kind, bizId, r.actor))) {
          throw new HttpError(
            409,
            `${kind} ${bizId} has no pending timeout to cancel (too late: a worker holds it, or it is already done, failed or cancelled; or never scheduled)`,
          );
        }
        return { json: { kind, bizId, cancelled: true }, text: `cancelled the pending ${kind} timeout of ${bizId}` };
      },
    },
    {
      path: /^\/timeouts\/reschedule$/,
      async act(r) {
        const { kind, bizId } = timeoutOf(r);
        const dueText = one(r.body, 'dueAt')?.trim() ?? '';
        const dueAt = new Date(dueText);
        if (!dueText || Number.isNaN(dueAt.getTime())) throw new HttpError(400, `dueAt must be a date and time such as 2026-11-23T08:00:00Z, got "${dueText}"`);
        if (!(await rescheduleAudited(db, kind, bizId, dueAt, r.actor))) {
          throw new HttpError(409, `${kind} ${bizId} has no pending timeout (an in-flight one is being applied now and cannot move)`);
        }
        return { json: { kind, bizId, dueAt }, text: `moved ${kind} ${bizId} to ${dueAt.toISOString()}` };
      },
    },
    {
      path: /^\/failed\/retry$/,
      async act(r) {
        const p = r.body;
        const single = one(p, 'one');
        const ids = (single ? [single] : many(p, 'id'))
          .flatMap((v) => v.split(','))
          .filter((v) => v.trim() !== '')
          .map((v) => positiveId(v, 'timeout id'));
        let selector: RetrySelector;
        if (ids.length > 0) selector = { id: ids };
        // A form says "all matching" explicitly; an API call names its filter (kind, scan, error).
        else if (one(p, 'all') === '1' || (r.api && (one(p, 'kind') || one(p, 'scan') || one(p, 'error')))) {
          const f = failedFilter({ get: (k: string) => one(p, k) });
          // "All matching" with no filter is every failed timeout: allowed, but only when asked for.
          if (!f.kind && !f.scan && !f.errorContains) {
            const { retried, left } = await retryEveryFailed(db, r.actor);
            return { json: { retried, left }, text: `retried ${retried} failed timeout(s)${left ? `; left ${left} alone` : ''}` };
          }
          selector = { kind: f.kind, scan: f.scan, errorContains: f.errorContains, id: undefined };
        } else throw new HttpError(400, 'select failed timeouts to retry (tick them), or use "retry all matching"');
        const result = await retryAudited(db, selector, r.actor);
        if (result.matched === 0) throw new HttpError(409, 'no failed timeouts match (nothing changed): already retried?');
        return {
          json: result,
          text: `retried ${result.retried} failed timeout(s)${result.left ? `; left ${result.left} alone: its object already has a live timeout, or a newer failed one` : ''}${result.notFailed.length ? `; not failed: ${result.notFailed.join(', ')}` : ''}`,
        };
      },
    },
  ];
}
