// The overview's chart, drawn on the server as SVG (no chart library, no script in the page):
// timeouts finished per minute over the last hour as bars, and their p95 lateness at commit (their
// shard's finished_at - due_at: operations/overview.ts lastHour) as a line on its own axis.
import type { MinutePoint } from '../operations/overview.js';
import { escapeHtml, formatSeconds, raw, type Html } from './html.js';

const W = 760;
const H = 220;
const PAD = { left: 56, right: 56, top: 16, bottom: 28 };

/** 1, 2, 5 x 10^n at or above v, so the axis reads in round numbers. */
function niceCeil(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

export function lastHourChart(points: MinutePoint[]): Html {
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const n = Math.max(points.length, 1);
  const maxCount = niceCeil(Math.max(0, ...points.map((p) => p.finished)));
  const maxLate = niceCeil(Math.max(0, ...points.map((p) => p.latenessP95 ?? 0)));
  const slot = plotW / n;
  const x = (i: number) => PAD.left + i * slot;
  const yCount = (v: number) => PAD.top + plotH - (v / maxCount) * plotH;
  const yLate = (v: number) => PAD.top + plotH - (v / maxLate) * plotH;
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="100%" role="img" class="chart" aria-label="timeouts finished per minute and p95 lateness, last hour">`,
  );
  for (let g = 0; g <= 4; g += 1) {
    const y = PAD.top + (plotH * g) / 4;
    parts.push(`<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${y}" y2="${y}" stroke="#e3e3e3"/>`);
    parts.push(`<text x="${PAD.left - 6}" y="${y + 4}" text-anchor="end" font-size="11" fill="#2b6cb0">${Math.round((maxCount * (4 - g)) / 4)}</text>`);
    parts.push(`<text x="${W - PAD.right + 6}" y="${y + 4}" font-size="11" fill="#c05621">${escapeHtml(formatSeconds((maxLate * (4 - g)) / 4) || '0')}</text>`);
  }
  points.forEach((p, i) => {
    if (p.finished <= 0) return;
    const y = yCount(p.finished);
    parts.push(
      `<rect x="${(x(i) + 1).toFixed(1)}" y="${y.toFixed(1)}" width="${Math.max(slot - 2, 1).toFixed(1)}" height="${(PAD.top + plotH - y).toFixed(1)}" fill="#90cdf4"><title>${escapeHtml(p.minute.toISOString().slice(11, 16))}Z: ${p.finished} finished, p95 lateness ${escapeHtml(formatSeconds(p.latenessP95) || '-')}</title></rect>`,
    );
  });
  const line = points
    .map((p, i) => (p.latenessP95 === null ? null : `${(x(i) + slot / 2).toFixed(1)},${yLate(p.latenessP95).toFixed(1)}`))
    .filter((v): v is string => v !== null);
  if (line.length > 0) {
    parts.push(`<polyline points="${line.join(' ')}" fill="none" stroke="#c05621" stroke-width="2"/>`);
    for (const pt of line) {
      const [cx, cy] = pt.split(',');
      parts.push(`<circle cx="${cx}" cy="${cy}" r="2" fill="#c05621"/>`);
    }
  }
  for (const i of [0, 15, 30, 45, n - 1]) {
    const p = points[i];
    if (!p) continue;
    parts.push(
      `<text x="${x(i) + slot / 2}" y="${H - 8}" text-anchor="middle" font-size="11" fill="#555">${escapeHtml(p.minute.toISOString().slice(11, 16))}Z</text>`,
    );
  }
  parts.push(`<text x="${PAD.left}" y="11" font-size="11" fill="#2b6cb0">finished / min</text>`);
  parts.push(`<text x="${W - PAD.right}" y="11" text-anchor="end" font-size="11" fill="#c05621">p95 lateness</text>`);
  parts.push('</svg>');
  return raw(parts.join(''));
}
