// The configuration's checks that span fields, run inside the schema (schema.ts) so that every
// entry point (parseConfig, loadConfig, command-line flags merged in before parsing) refuses the
// same configs with the same error style.
import cron from 'node-cron';
import type { z } from 'zod';
import { BUSINESS_DATABASE_NAME, type codeHandler, type httpHandler, type sqlHandler } from './kinds.js';

/** Checks that span fields, in the schema itself so that every entry point (parseConfig,
 *  loadConfig, command-line flags merged in before parsing) refuses the same configs. */
export function crossFieldChecks(
  config: {
    kinds: Record<string, { timeLimitMs: number }>;
    databaseSilenceMs?: number | undefined;
    coordinator: { schedule: string };
    worker: { kinds?: string[] | undefined; leaseMs: number };
  },
  ctx: z.RefinementCtx,
): void {
  const declared = Object.keys(config.kinds);
  const unknown = (config.worker.kinds ?? []).filter((k) => !declared.includes(k));
  if (unknown.length > 0) {
    ctx.addIssue({ code: 'custom', path: ['worker', 'kinds'], message: `unknown kind(s) ${unknown.join(', ')}; declared kinds: ${declared.join(', ')}` });
  }
  for (const [name, kind] of Object.entries(config.kinds)) {
    if (kind.timeLimitMs >= config.worker.leaseMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['kinds', name, 'timeLimitMs'],
        message: `${kind.timeLimitMs} ms must be below worker.leaseMs (${config.worker.leaseMs} ms), or a slow shard would be reclaimed while it runs`,
      });
    }
  }
  const longest = Math.max(0, ...Object.values(config.kinds).map((k) => k.timeLimitMs));
  if (config.databaseSilenceMs !== undefined && config.databaseSilenceMs <= longest) {
    ctx.addIssue({
      code: 'custom',
      path: ['databaseSilenceMs'],
      message: `${config.databaseSilenceMs} ms must be above the longest kind's timeLimitMs (${longest} ms): a handler's statement may be silent that long`,
    });
  }
  if (!cron.validate(config.coordinator.schedule)) {
    ctx.addIssue({
      code: 'custom',
      path: ['coordinator', 'schedule'],
      message: `"${config.coordinator.schedule}" is not a valid node-cron expression (six fields, seconds first, e.g. "* * * * * *")`,
    });
  }
}

/** Cross-field checks of business databases and routes: names exist, ranges are sound. */
export function checkBusinessDatabases(
  config: {
    businessDatabases: Record<string, unknown>;
    kinds: Record<string, { handler: z.output<typeof sqlHandler> | z.output<typeof httpHandler> | z.output<typeof codeHandler>; store?: 'center' | 'beside' }>;
  },
  ctx: z.RefinementCtx,
): void {
  const declared = Object.keys(config.businessDatabases);
  for (const name of declared) {
    if (!BUSINESS_DATABASE_NAME.test(name)) {
      ctx.addIssue({
        code: 'custom',
        path: ['businessDatabases', name],
        message: 'database names are lower-case letters, digits and _, starting with a letter (e.g. orders_0)',
      });
    } else if (name === 'center') {
      // Operators, logs and metrics call the center's own database "center" (stores/layout.ts).
      ctx.addIssue({ code: 'custom', path: ['businessDatabases', name], message: '"center" names the center\'s own database: pick another name' });
    }
  }
  const known = (path: (string | number)[], name: string) => {
    if (!(name in config.businessDatabases)) {
      ctx.addIssue({
        code: 'custom',
        path,
        message: `unknown business database "${name}"; declared: ${declared.length ? declared.join(', ') : 'none (add it under businessDatabases)'}`,
      });
    }
  };
  for (const [kind, { handler, store }] of Object.entries(config.kinds ?? {})) {
    const base = ['kinds', kind, 'handler'];
    if (store === 'beside' && handler.type !== 'sql') {
      ctx.addIssue({
        code: 'custom',
        path: ['kinds', kind, 'store'],
        message: 'store: beside takes a SQL handler with a route or a database (its statement runs in the store)',
      });
      continue;
    }
    if (handler.type === 'code' && handler.database) known([...base, 'database'], handler.database);
    if (handler.type !== 'sql') continue;
    if (handler.database && handler.route) ctx.addIssue({ code: 'custom', path: base, message: 'give database or route, not both' });
    if (store === 'beside' && !handler.database && !handler.route) {
      ctx.addIssue({
        code: 'custom',
        path: ['kinds', kind, 'store'],
        message: 'store: beside keeps the timeouts in the business database the handler picks: give the handler a route or a database',
      });
    }
    if (handler.database) known([...base, 'database'], handler.database);
    const route = handler.route;
    if (!route) continue;
    if (route.by === 'range') {
      route.ranges.forEach((r, i) => {
        known([...base, 'route', 'ranges', i, 'database'], r.database);
        if (r.from >= r.to)
          ctx.addIssue({
            code: 'custom',
            path: [...base, 'route', 'ranges', i],
            message: `from (${r.from}) must be below to (${r.to}): a range is from <= biz_id < to`,
          });
      });
      const sorted = route.ranges.map((r, i) => ({ ...r, i })).sort((a, b) => a.from - b.from);
      for (let j = 1; j < sorted.length; j += 1) {
        const prev = sorted[j - 1]!;
        const cur = sorted[j]!;
        if (cur.from < prev.to) {
          ctx.addIssue({
            code: 'custom',
            path: [...base, 'route', 'ranges', cur.i],
            message: `overlaps range ${prev.i} ([${prev.from}, ${prev.to}) -> ${prev.database}): every biz_id must map to one database`,
          });
        }
      }
    } else {
      route.databases.forEach((d, i) => known([...base, 'route', 'databases', i], d));
    }
  }
}
