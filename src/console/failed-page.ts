// The Failed page: failed timeouts by filter (kind, store, scan, error text), of every store with
// stores, each ticked one naming its store; retry a selection or all matching.
import type { FailedFilter, FailedRow } from '../operations/timeouts.js';
import { html, raw } from './html.js';
import { layout } from './pages.js';
import { actionButton, csrfField, num, type PageContext } from './parts.js';
import { scanPath, storeCell, storeHead, storePicker, unreachableNotice } from './store-pages.js';
import type { StoreState } from './stores.js';

export function failedPage(
  ctx: PageContext,
  kinds: string[],
  filter: FailedFilter & { store?: string | undefined },
  total: number,
  rows: (FailedRow & { store?: string })[],
  states?: StoreState[],
): string {
  const qs = new URLSearchParams();
  if (filter.store) qs.set('store', filter.store);
  if (filter.kind) qs.set('kind', filter.kind);
  if (filter.scan) qs.set('scan', String(filter.scan));
  if (filter.errorContains) qs.set('error', filter.errorContains);
  const back = `/failed${qs.size ? `?${qs}` : ''}`;
  const filterFields = {
    kind: filter.kind ?? '',
    scan: filter.scan ? String(filter.scan) : '',
    error: filter.errorContains ?? '',
    ...(filter.store ? { store: filter.store } : {}),
  };
  // With stores, a ticked timeout names its store (ids are per store).
  const idValue = (t: FailedRow & { store?: string }) => (ctx.stores && t.store ? `${t.store}:${t.timeoutId}` : String(t.timeoutId));
  const body = html` <form method="get" action="${ctx.base}/failed" id="filter">
      <select name="kind" aria-label="kind">
        <option value="">all kinds</option>
        ${kinds.map((k) => html`<option value="${k}" ${k === filter.kind ? raw('selected') : ''}>${k}</option>`)}
      </select>
      ${storePicker(ctx, filter.store)}
      <input name="scan" placeholder="scan id" size="8" value="${filter.scan ?? ''}" aria-label="scan" />
      <input name="error" placeholder="error contains" size="30" value="${filter.errorContains ?? ''}" aria-label="error contains" />
      <button type="submit">Filter</button>
    </form>
    ${unreachableNotice(states, 'failed timeouts')}
    <p id="failed-total">
      ${total} failed timeout${total === 1 ? '' : 's'} match${rows.length < total ? html` (showing ${rows.length})` : ''}
      ${total > 0 ? actionButton(ctx, '/actions/failed/retry', `Retry all ${total} matching`, back, { ...filterFields, all: '1' }) : ''}
    </p>
    ${
      rows.length > 0
        ? html`<form method="post" action="${ctx.base}/actions/failed/retry" id="selection">
            ${csrfField(ctx)}<input type="hidden" name="back" value="${back}" />
            <table id="failed">
              <tr>
                <th></th>
                ${storeHead(ctx)}
                <th>timeout</th>
                <th>kind</th>
                <th>biz id</th>
                <th>due</th>
                <th>attempts</th>
                <th>failed at</th>
                <th>shard</th>
                <th>scan</th>
                <th>error</th>
                <th></th>
              </tr>
              ${rows.map(
                (t) =>
                  html`<tr data-timeout="${t.timeoutId}" data-store="${t.store ?? ''}">
                    <td><input type="checkbox" name="id" value="${idValue(t)}" aria-label="select ${t.timeoutId}" /></td>
                    ${storeCell(ctx, t.store)}
                    <td>${t.timeoutId}</td>
                    <td>${t.kind}</td>
                    <td><a href="${ctx.base}/timeouts?kind=${encodeURIComponent(t.kind)}&bizId=${encodeURIComponent(t.bizId)}">${t.bizId}</a></td>
                    <td>${t.dueAt}</td>
                    ${num(t.attempts)}
                    <td>${t.failedAt}</td>
                    ${num(t.shardId)}
                    <td>${t.scanId !== null ? html`<a href="${ctx.base}${scanPath(t.store, t.scanId)}">${t.scanId}</a>` : ''}</td>
                    <td class="err">${t.lastError}</td>
                    <td><button type="submit" name="one" value="${idValue(t)}">Retry</button></td>
                  </tr>`,
              )}
            </table>
            <button type="submit">Retry selected</button>
          </form>`
        : ''
    }`;
  return layout(ctx, '/failed', 'Failed timeouts', body);
}
