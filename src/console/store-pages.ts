// The console's pieces about stores (docs/scale.md "Acting across stores"): the overview's Stores
// section, the note naming a store that did not answer, the store column of the lists, and links
// and form fields that address a store. All of them are empty without stores (ctx.stores unset),
// so a console whose kinds all live in the center looks as before.
import type { StoreOverview } from '../operations/stores-overview.js';
import { CENTER } from '../stores/store-directory.js';
import { formatSeconds, html, raw, type Html } from './html.js';
import { num, type PageContext } from './parts.js';
import type { StoreState } from './stores.js';

/** Each store: its kinds, backlog, lag, failed, leader and live workers, or UNREACHABLE with why. */
export function storesSection(ctx: PageContext, stores: StoreOverview[] | undefined): Html {
  if (!stores) return html``;
  return html`<h2>Stores: ${stores.length}</h2>
    <p class="muted">Kinds stored beside their orders keep their timeouts in these business databases, each led by its own coordinator.</p>
    <table id="stores">
      <tr>
        <th>store</th>
        <th>kinds</th>
        <th>due waiting</th>
        <th>in flight</th>
        <th>oldest lag</th>
        <th>failed</th>
        <th>leader</th>
        <th>live workers</th>
      </tr>
      ${stores.map((s) =>
        s.reachable
          ? html`<tr data-store="${s.store}">
              <td><strong>${s.store}</strong></td>
              <td>${s.kinds.join(', ')}</td>
              ${num(s.pendingDue)}${num(s.inFlight)}
              <td class="n">${formatSeconds(s.oldestLagSeconds)}</td>
              <td class="n">${s.failed ? html`<a href="${ctx.base}/failed?store=${encodeURIComponent(s.store)}">${s.failed}</a>` : '0'}</td>
              <td>${s.leader ? `${s.leader.holder ?? '?'} · epoch ${s.leader.epoch}` : 'none elected yet'}</td>
              ${num(s.liveWorkers)}
            </tr>`
          : html`<tr data-store="${s.store}">
              <td><strong>${s.store}</strong></td>
              <td>${s.kinds.join(', ')}</td>
              <td colspan="6" class="critical">UNREACHABLE: ${s.error}</td>
            </tr>`,
      )}
    </table>`;
}

/** One note for the stores that did not answer: what of theirs is missing from the page. */
export function unreachableNotice(states: StoreState[] | undefined, what: string): Html {
  const down = (states ?? []).filter((s) => !s.reachable);
  if (down.length === 0) return html``;
  return html`<div class="unreachable flash err" role="status">
    ${down.map((s) => html`<div>store <strong>${s.store}</strong> UNREACHABLE (${s.error}): its ${what} are not shown; the other stores are.</div>`)}
  </div>`;
}

/** The store column's header and cell (nothing without stores). */
export const storeHead = (ctx: PageContext): Html => (ctx.stores ? html`<th>store</th>` : html``);
export const storeCell = (ctx: PageContext, store: string | null | undefined): Html => (ctx.stores ? html`<td class="store">${store ?? CENTER}</td>` : html``);

/** A scan's page: scan ids are per store (the center's keep their old address). */
export function scanPath(store: string | undefined, scanId: number | string): string {
  return !store || store === CENTER ? `/scans/${scanId}` : `/scans/${encodeURIComponent(store)}/${scanId}`;
}

/** The store picker of a filter form. */
export function storePicker(ctx: PageContext, selected: string | undefined): Html {
  if (!ctx.stores) return html``;
  return html`<select name="store" aria-label="store">
    <option value="">all stores</option>
    ${ctx.stores.map((s) => html`<option value="${s}" ${s === selected ? raw('selected') : ''}>${s}</option>`)}
  </select>`;
}

/** "in store X" after a title, with stores. */
export const inStore = (ctx: PageContext, store: string | undefined): string => (ctx.stores && store ? ` (store ${store})` : '');
