// The console's route table: each page (GET, as HTML or as JSON under /api) and each action (POST,
// a form under /actions or JSON under /api) is one entry, a path pattern and a thin handler over
// src/operations/. What a route reads or does lives there; this file only parses and words it.
import type { Kysely } from 'kysely';
import type pg from 'pg';
import type { Database } from '../db/schema.js';
import { listAudit } from '../operations/audit.js';
import { kindNames, kindSettings, listKindControls, listTargetControls } from '../operations/actions.js';
import { readRelease } from '../release/fleet.js';
import { VERSION } from '../version.js';
import { kindBacklog, lastHour, leader, liveWorkers, openBreakers, type MinutePoint } from '../operations/overview.js';
import { getScan, listScans } from '../operations/scans.js';
import { readStoreFigures, type StoreOverview } from '../operations/stores-overview.js';
import { listFailed, timeoutHistory } from '../operations/timeouts.js';
import { collectWarnings, horizonWarnings, type Warning } from '../operations/warnings.js';
import { HORIZON_DEFAULTS, readHorizon, type HorizonLimits } from '../operations/vacuum-horizon.js';
import { failedFilter, HttpError, positiveId, type ConsoleRequest } from './http.js';
import { failedPage } from './failed-page.js';
import { auditPage, kindsPage, overviewPage, timeoutsPage, warningsPage, type KindRow, type PageContext } from './pages.js';
import { scanPage, scansPage } from './scan-pages.js';
import { CENTER, mergeRows, storeStates, type ConsoleStores } from './stores.js';

export interface RouteDeps {
  pool: pg.Pool;
  db: Kysely<Database>;
  lagSlaSeconds: number;
  /** When a vacuum horizon holder is worth a warning (alerts.vacuumHorizonMs / Xids). */
  horizon?: HorizonLimits | undefined;
  /** The center and, with a config that names them, the stores. */
  stores: ConsoleStores;
}

export interface PageRoute {
  path: RegExp;
  read(r: ConsoleRequest, ctx: PageContext, match: RegExpExecArray): Promise<{ json: unknown; page: () => string }>;
}

export interface ActionRoute {
  path: RegExp;
  /** What it did, as JSON and as one line for the page (shown as an error when ok is false: a
   *  store did not answer). */
  act(r: ConsoleRequest, match: RegExpExecArray): Promise<{ json: unknown; text: string; ok?: boolean }>;
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

export function pageRoutes({ pool, lagSlaSeconds, horizon, stores }: RouteDeps): PageRoute[] {
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
  // Each store's figures for the overview, or why it does not answer (undefined without stores).
  const storesFigures = async (): Promise<StoreOverview[] | undefined> => {
    if (!stores.multi) return undefined;
    const answers = await stores.each(
      stores.names.filter((s) => s !== CENTER),
      (d) => readStoreFigures(d.pool),
    );
    return answers.map((a) => {
      const kinds = stores.kindsOf(a.store) ?? [];
      return a.ok ? { store: a.store, kinds, reachable: true, ...a.value } : { store: a.store, kinds, reachable: false, error: a.error };
    });
  };
  // What holds back VACUUM in each store (the center's is in collectWarnings); a store that does not
  // answer is named on the overview already.
  const storesHorizonWarnings = async (): Promise<Warning[]> => {
    if (!stores.multi) return [];
    const answers = await stores.each(
      stores.names.filter((s) => s !== CENTER),
      (d) => readHorizon(d.pool),
    );
    return answers.flatMap((a) => (a.ok ? horizonWarnings(a.store, a.value, horizon ?? HORIZON_DEFAULTS) : []));
  };
  const scanRead = async (ctx: PageContext, store: string, id: string) => {
    const scanId = positiveId(id, 'scan id');
    const found = await stores.one(store, (d) => getScan(d.pool, scanId));
    if (!found) throw new HttpError(404, `scan ${scanId} does not exist${stores.multi ? ` in store ${store}` : ''} (never created, or purged by retention)`);
    return { json: stores.multi ? { store, ...found } : found, page: () => scanPage(ctx, found.scan, found.shards, store) };
  };

  return [
    {
      path: /^(?:\/|\/overview)?$/,
      async read(_r, ctx) {
        const [backlog, lead, workers, hour, breakers, warnings, storeFigures, storeHorizon, releaseNow] = await Promise.all([
          kindBacklog(pool),
          leader(pool),
          liveWorkers(pool),
          lastHourCached(),
          openBreakers(pool),
          collectWarnings(pool, { lagSlaSeconds, horizon }),
          storesFigures(),
          storesHorizonWarnings(),
          readRelease(pool),
        ]);
        const release = { console: VERSION, ...releaseNow };
        const d = {
          backlog,
          leader: lead,
          workers,
          lastHour: hour,
          breakers,
          warnings: [...warnings.warnings, ...storeHorizon],
          stores: storeFigures,
          release,
        };
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
        const kind = r.query.get('kind') || undefined;
        const answers = await stores.each(stores.scope(r.query.get('store')), (d) => listScans(d.pool, { limit, kind }));
        if (!stores.multi) return { json: answers[0]!.ok ? answers[0]!.value : [], page: () => scansPage(ctx, answers[0]!.ok ? answers[0]!.value : []) };
        // Newest first by start time (scan ids are per store), then the limit.
        const scans = mergeRows(answers, (x, y) => y.startedAt.getTime() - x.startedAt.getTime()).slice(0, limit);
        const states = storeStates(answers);
        return { json: { stores: states, scans }, page: () => scansPage(ctx, scans, states) };
      },
    },
    {
      // A store's scan: scan ids are per store.
      path: /^\/scans\/([^/]+)\/([^/]+)$/,
      read: (_r, ctx, m) => scanRead(ctx, param(m), decodeURIComponent(m[2]!)),
    },
    {
      path: /^\/scans\/([^/]+)$/,
      read: (_r, ctx, m) => scanRead(ctx, CENTER, param(m)),
    },
    {
      path: /^\/timeouts$/,
      async read(r, ctx) {
        const kind = r.query.get('kind') || undefined;
        const bizId = r.query.get('bizId')?.trim() || undefined;
        const kinds = await kindNames(pool);
        // A kind stored beside its orders: the store its rule picks for the business id.
        const store = kind && bizId ? await stores.place(kind, bizId) : undefined;
        const rows = kind && bizId && store ? await stores.one(store, (d) => timeoutHistory(d.pool, kind, bizId)) : null;
        return {
          json: stores.multi ? { store: store ?? null, rows: rows ?? [] } : (rows ?? []),
          page: () => timeoutsPage(ctx, kinds, { kind, bizId }, rows, store),
        };
      },
    },
    {
      path: /^\/failed$/,
      async read(r, ctx) {
        const filter = { ...failedFilter(r.query), store: r.query.get('store') || undefined };
        let scope = stores.scope(filter.store);
        if (filter.kind) scope = scope.filter((s) => stores.storesOfKind(filter.kind!).includes(s));
        if (filter.scan && scope.length > 1) throw new HttpError(400, `scan ids are per store: pick the store of scan ${filter.scan} (${scope.join(', ')})`);
        const [kinds, answers] = await Promise.all([kindNames(pool), stores.each(scope, (d) => listFailed(d.pool, filter, 200))]);
        const total = answers.reduce((n, a) => n + (a.ok ? a.value.total : 0), 0);
        const rows = mergeRows(
          answers.map((a) => (a.ok ? { ...a, value: a.value.rows } : a)),
          (x, y) => (y.failedAt?.getTime() ?? 0) - (x.failedAt?.getTime() ?? 0) || y.timeoutId - x.timeoutId,
        ).slice(0, 200);
        const states = storeStates(answers);
        if (!stores.multi) return { json: { total, rows: rows.map(({ store: _s, ...t }) => t) }, page: () => failedPage(ctx, kinds, filter, total, rows) };
        return { json: { total, stores: states, rows }, page: () => failedPage(ctx, kinds, filter, total, rows, states) };
      },
    },
    {
      path: /^\/warnings$/,
      async read(_r, ctx) {
        const [report, storeWarnings] = await Promise.all([collectWarnings(pool, { lagSlaSeconds, horizon }), storesHorizonWarnings()]);
        report.warnings.push(...storeWarnings);
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
