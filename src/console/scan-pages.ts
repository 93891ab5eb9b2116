// The Scans page (the recent scans, of every store with stores) and a scan's page (its shards,
// with "Rerun this shard"). Scan ids are per store: a store's scan lives at /scans/<store>/<id>.
import type { ScanSummary, ShardSummary } from '../operations/scans.js';
import { formatSeconds, html } from './html.js';
import { layout } from './pages.js';
import { actionButton, num, stateCell, type PageContext } from './parts.js';
import { inStore, scanPath, storeCell, storeHead, unreachableNotice } from './store-pages.js';
import type { StoreState } from './stores.js';

export function scansPage(ctx: PageContext, scans: (ScanSummary & { store?: string })[], states?: StoreState[]): string {
  const body = html`${unreachableNotice(states, 'scans')}
    <table id="scans">
      <tr>
        ${storeHead(ctx)}
        <th>scan</th>
        <th>state</th>
        <th>claimed</th>
        <th>shards</th>
        <th>done</th>
        <th>skipped</th>
        <th>failed</th>
        <th>retried</th>
        <th>started</th>
        <th>duration</th>
        <th>epoch</th>
      </tr>
      ${scans.map(
        (s) =>
          html`<tr>
            ${storeCell(ctx, s.store)}
            <td><a href="${ctx.base}${scanPath(s.store, s.scanId)}">${s.scanId}</a></td>
            <td>${s.state}</td>
            ${num(s.claimed)}${num(s.shards)}${num(s.done)}${num(s.skipped)}
            <td class="n ${s.failed ? 'state-failed' : ''}">${s.failed ?? ''}</td>
            ${num(s.retried)}
            <td>${s.startedAt}</td>
            <td class="n">${formatSeconds(s.durationSeconds)}</td>
            ${num(s.epoch)}
          </tr>`,
      )}
    </table>
    ${scans.length === 0 ? html`<p class="muted">no scans yet</p>` : ''}
    ${ctx.stores ? html`<p class="muted">Scan ids are per store: each store's coordinator numbers its own.</p>` : ''}`;
  return layout(ctx, '/scans', 'Scans', body);
}

export function scanPage(ctx: PageContext, scan: ScanSummary, shards: ShardSummary[], store?: string): string {
  const back = scanPath(store, scan.scanId);
  const body = html` <div class="card">
      state <strong>${scan.state}</strong> · cutoff ${scan.cutoff} · claimed ${scan.claimed} · ${scan.shards} shards · coordinator ${scan.coordinator} (epoch
      ${scan.epoch}) · started ${scan.startedAt}${scan.reducedAt ? html` · reduced ${scan.reducedAt}` : ''}
    </div>
    <table id="shards">
      <tr>
        <th>shard</th>
        <th>kind</th>
        <th>size</th>
        <th>state</th>
        <th>attempts</th>
        <th>owner</th>
        <th>done</th>
        <th>skipped</th>
        <th>failed</th>
        <th>retried</th>
        <th>duration</th>
        <th>error sample</th>
        <th></th>
      </tr>
      ${shards.map(
        (s) =>
          html`<tr data-shard="${s.shardId}">
            <td>${s.shardId}</td>
            <td>${s.kind}</td>
            ${num(s.size)}${stateCell(s.state)}${num(s.attempts)}
            <td>${s.owner}</td>
            ${num(s.done)}${num(s.skipped)}${num(s.failed)}${num(s.retried)}
            <td class="n">${formatSeconds(s.durationSeconds)}</td>
            <td class="err">${s.errorSample}</td>
            <td>
              ${(s.state === 'done' || s.state === 'failed') && s.failedNow > 0 ? actionButton(ctx, `/actions/shards/${s.shardId}/rerun`, `Rerun this shard (${s.failedNow} failed)`, back, store ? { store } : {}) : ''}
            </td>
          </tr>`,
      )}
    </table>
    <p class="muted">Rerun puts the shard's failed timeouts back to pending (attempts 0, due now); the next scan applies them in a new shard.</p>`;
  return layout(ctx, '/scans', `Scan ${scan.scanId}${inStore(ctx, store)}`, body);
}
