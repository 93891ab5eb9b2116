// The console's actions (POST: a form under /actions or JSON under /api), each a thin handler over
// the audited functions of src/operations/. With stores, an action on timeouts runs in the store
// that holds them (a business object's store by its kind's rule; a shard's or a ticked timeout's
// store as the page names it; "retry all" in every store of the kind), and the store's audit rows
// are then copied to the center's audit_log. A store that does not answer is named in the result,
// and the others still act.
import {
  cancelAudited,
  pauseKind,
  rerunShard,
  rescheduleAudited,
  resumeKind,
  retryAudited,
  retryEveryFailed,
  setKindLimits,
  setTargetRateLimit,
} from '../operations/actions.js';
import type { RetryResult, RetrySelector } from '../operations/retry.js';
import { failedFilter, HttpError, limitValue, many, one, positiveId, type ConsoleRequest } from './http.js';
import type { ActionRoute, RouteDeps } from './routes.js';
import { AUDIT_WAITS, CENTER, type ConsoleStores } from './stores.js';

const param = (m: RegExpExecArray) => decodeURIComponent(m[1]!);

export function actionRoutes({ pool, stores }: RouteDeps): ActionRoute[] {
  const timeoutOf = (r: ConsoleRequest) => {
    const kind = one(r.body, 'kind') ?? '';
    const bizId = one(r.body, 'bizId')?.trim() ?? '';
    if (!kind || !bizId) throw new HttpError(400, 'give a kind and a business id (bizId)');
    return { kind, bizId };
  };
  // " in store S" after a result, and the note when its audit rows wait in the store.
  const where = (store: string, audited: boolean) => `${stores.multi ? ` in store ${store}` : ''}${audited ? '' : ` ${AUDIT_WAITS}`}`;
  const withStore = <T extends object>(json: T, store: string) => (stores.multi ? { ...json, store } : json);
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
      // Shard ids are per store: `store` names it (the center by default).
      path: /^\/shards\/([^/]+)\/rerun$/,
      async act(r, m) {
        const shardId = positiveId(param(m), 'shard id');
        const store = one(r.body, 'store') || CENTER;
        const result = await stores.one(store, (d) => rerunShard(d.db, shardId, r.actor));
        const audited = await stores.forwardAudit(store);
        return {
          json: withStore(result, store),
          text: `shard ${shardId}${where(store, audited)}: ${result.retried} failed timeout(s) back to pending${result.left ? `, ${result.left} left alone (a live timeout exists for the object)` : ''}`,
        };
      },
    },
    {
      path: /^\/timeouts\/cancel$/,
      async act(r) {
        const { kind, bizId } = timeoutOf(r);
        const store = await stores.place(kind, bizId);
        if (!(await stores.one(store, (d) => cancelAudited(d.db, kind, bizId, r.actor)))) {
          throw new HttpError(
            409,
            `${kind} ${bizId} has no pending timeout to cancel (too late: a worker holds it, or it is already done, failed or cancelled; or never scheduled)`,
          );
        }
        const audited = await stores.forwardAudit(store);
        return { json: withStore({ kind, bizId, cancelled: true }, store), text: `cancelled the pending ${kind} timeout of ${bizId}${where(store, audited)}` };
      },
    },
    {
      path: /^\/timeouts\/reschedule$/,
      async act(r) {
        const { kind, bizId } = timeoutOf(r);
        const dueText = one(r.body, 'dueAt')?.trim() ?? '';
        const dueAt = new Date(dueText);
        if (!dueText || Number.isNaN(dueAt.getTime())) throw new HttpError(400, `dueAt must be a date and time such as 2026-11-23T08:00:00Z, got "${dueText}"`);
        const store = await stores.place(kind, bizId);
        if (!(await stores.one(store, (d) => rescheduleAudited(d.db, kind, bizId, dueAt, r.actor)))) {
          throw new HttpError(409, `${kind} ${bizId} has no pending timeout (an in-flight one is being applied now and cannot move)`);
        }
        const audited = await stores.forwardAudit(store);
        return { json: withStore({ kind, bizId, dueAt }, store), text: `moved ${kind} ${bizId} to ${dueAt.toISOString()}${where(store, audited)}` };
      },
    },
    { path: /^\/failed\/retry$/, act: (r) => retryAction(stores, r) },
  ];
}

type StoreRetry = Pick<RetryResult, 'retried' | 'left'> & Partial<RetryResult> & { audited: boolean };

/**
 * Retry by ticked ids (each "store:id" with stores, or plain ids in the store `store` names), or
 * "all matching" a filter in every store it covers (a kind: the stores of the kind; `store`: that
 * one). Several stores: one result each; a store that does not answer is named, the others act.
 */
async function retryAction(stores: ConsoleStores, r: ConsoleRequest): Promise<{ json: unknown; text: string; ok?: boolean }> {
  const p = r.body;
  const named = one(p, 'store') || undefined;
  const single = one(p, 'one');
  const values = (single ? [single] : many(p, 'id'))
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
  let scope: string[];
  let selectorOf: ((store: string) => RetrySelector) | 'every';
  if (values.length > 0) {
    const byStore = new Map<string, number[]>();
    for (const v of values) {
      const m = /^(.+):(\d+)$/.exec(v);
      const store = stores.scope(m ? m[1]! : (named ?? CENTER))[0]!;
      byStore.set(store, [...(byStore.get(store) ?? []), positiveId(m ? m[2]! : v, 'timeout id')]);
    }
    scope = [...byStore.keys()];
    selectorOf = (store) => ({ id: byStore.get(store)! });
  } else if (one(p, 'all') === '1' || (r.api && (one(p, 'kind') || one(p, 'scan') || one(p, 'error')))) {
    // A form says "all matching" explicitly; an API call names its filter (kind, scan, error).
    const f = failedFilter({ get: (k: string) => one(p, k) });
    scope = stores.scope(named);
    if (f.kind) scope = scope.filter((s) => stores.storesOfKind(f.kind!).includes(s));
    if (f.scan && scope.length > 1) throw new HttpError(400, `scan ids are per store: name the store of scan ${f.scan} (${scope.join(', ')})`);
    // "All matching" with no filter is every failed timeout: allowed, but only when asked for.
    selectorOf = !f.kind && !f.scan && !f.errorContains ? 'every' : () => ({ kind: f.kind, scan: f.scan, errorContains: f.errorContains, id: undefined });
  } else throw new HttpError(400, 'select failed timeouts to retry (tick them), or use "retry all matching"');

  const answers = await stores.each(scope, async (d): Promise<StoreRetry> => {
    const result = selectorOf === 'every' ? await retryEveryFailed(d.db, r.actor) : await retryAudited(d.db, selectorOf(d.store), r.actor);
    return { ...result, audited: await stores.forwardAudit(d.store) };
  });
  const done = answers.flatMap((a) => (a.ok ? [{ store: a.store, ...a.value }] : []));
  const down = answers.flatMap((a) => (a.ok ? [] : [a]));
  const downText = down.map((a) => `store ${a.store} UNREACHABLE (${a.error}): nothing retried there; retry again when it answers`);
  const acted = selectorOf === 'every' || done.some((a) => (a.matched ?? a.retried + a.left) > 0);
  if (!acted) {
    if (down.length > 0) throw new HttpError(503, downText.join('; '));
    throw new HttpError(409, 'no failed timeouts match (nothing changed): already retried?');
  }
  const describe = (a: StoreRetry) =>
    `retried ${a.retried} failed timeout(s)${a.left ? `; left ${a.left} alone${a.ids ? ': its object already has a live timeout, or a newer failed one' : ''}` : ''}${a.notFailed?.length ? `; not failed: ${a.notFailed.join(', ')}` : ''}${a.audited ? '' : ` ${AUDIT_WAITS}`}`;
  const strip = ({ audited: _a, ...rest }: StoreRetry & { store: string }) => rest;
  if (!stores.multi) {
    const { store: _s, ...only } = strip(done[0]!);
    return { json: only, text: describe(done[0]!) };
  }
  const retried = done.reduce((n, a) => n + a.retried, 0);
  const left = done.reduce((n, a) => n + a.left, 0);
  const perStore = answers.map((a) => (a.ok ? strip({ store: a.store, ...a.value }) : { store: a.store, unreachable: a.error }));
  return {
    json: { retried, left, stores: perStore },
    text: [...done.map((a) => `store ${a.store}: ${describe(a)}`), ...downText].join('; '),
    ok: down.length === 0,
  };
}
