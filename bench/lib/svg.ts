// Hand-written SVG charts (no dependency): horizontal bars (linear or log scale, one or more
// series per row) and a line chart for time series. Plain SVG 1.1, readable on GitHub.

const COLORS = ['#2563eb', '#f59e0b', '#10b981', '#ef4444', '#8b5cf6', '#0ea5e9', '#84cc16', '#ec4899', '#64748b', '#14b8a6', '#a855f7'];
const FONT = 'font-family="Helvetica, Arial, sans-serif"';

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function fmt(v: number): string {
  if (v === 0) return '0';
  if (v >= 100_000) return `${Math.round(v / 1000)}k`;
  if (v >= 10_000) return `${(v / 1000).toFixed(1)}k`;
  if (v >= 100) return String(Math.round(v));
  if (v >= 1) return v.toFixed(1).replace(/\.0$/, '');
  return v.toPrecision(2);
}

export interface BarRow {
  label: string;
  values: (number | null)[];
}

export interface BarChartOptions {
  title: string;
  unit: string;
  series: string[];
  rows: BarRow[];
  log?: boolean;
  width?: number;
}

export function barChart(o: BarChartOptions): string {
  const width = o.width ?? 760;
  const left = 190;
  const right = 70;
  const barH = 14;
  const gap = 4;
  const rowH = o.series.length * (barH + 2) + gap * 2;
  const top = 48;
  const height = top + o.rows.length * rowH + 40;
  const plotW = width - left - right;
  const all = o.rows.flatMap((r) => r.values).filter((v): v is number => v !== null && v > 0);
  const max = Math.max(...all, 1e-9);
  const min = o.log ? Math.min(...all, max) : 0;
  const lo = o.log ? Math.pow(10, Math.floor(Math.log10(min))) : 0;
  const hi = o.log ? Math.pow(10, Math.ceil(Math.log10(max))) : max * 1.05;
  const x = (v: number) => (o.log ? ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * plotW : (v / hi) * plotW);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ${FONT} font-size="12">`);
  out.push(`<rect width="100%" height="100%" fill="white"/>`);
  out.push(`<text x="${width / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">${esc(o.title)}</text>`);
  // legend
  if (o.series.length > 1) {
    o.series.forEach((s, i) => {
      const lx = left + i * 130;
      out.push(`<rect x="${lx}" y="30" width="10" height="10" fill="${COLORS[i % COLORS.length]}"/><text x="${lx + 14}" y="39">${esc(s)}</text>`);
    });
  }
  // grid
  const ticks: number[] = [];
  if (o.log) for (let t = lo; t <= hi * 1.0001; t *= 10) ticks.push(t);
  else for (let i = 0; i <= 5; i++) ticks.push((hi / 5) * i);
  const plotBottom = top + o.rows.length * rowH;
  for (const t of ticks) {
    const tx = left + x(t);
    out.push(`<line x1="${tx.toFixed(1)}" y1="${top - 4}" x2="${tx.toFixed(1)}" y2="${plotBottom}" stroke="#e5e7eb"/>`);
    out.push(`<text x="${tx.toFixed(1)}" y="${plotBottom + 16}" text-anchor="middle" fill="#555">${fmt(t)}</text>`);
  }
  out.push(`<text x="${left + plotW / 2}" y="${plotBottom + 32}" text-anchor="middle" fill="#333">${esc(o.unit)}${o.log ? ' (log scale)' : ''}</text>`);
  o.rows.forEach((r, i) => {
    const y0 = top + i * rowH + gap;
    out.push(`<text x="${left - 8}" y="${y0 + rowH / 2}" text-anchor="end" dominant-baseline="middle">${esc(r.label)}</text>`);
    r.values.forEach((v, j) => {
      const y = y0 + j * (barH + 2);
      if (v === null) {
        out.push(`<text x="${left + 4}" y="${y + barH - 3}" fill="#999">n/a</text>`);
        return;
      }
      const w = Math.max(1, x(v));
      out.push(`<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${barH}" fill="${COLORS[j % COLORS.length]}"/>`);
      out.push(`<text x="${(left + w + 4).toFixed(1)}" y="${y + barH - 3}" fill="#222">${fmt(v)}</text>`);
    });
  });
  out.push('</svg>');
  return out.join('\n');
}

export interface LineSeries {
  label: string;
  points: { x: number; y: number }[];
}

export function lineChart(o: { title: string; xUnit: string; yUnit: string; series: LineSeries[]; width?: number; height?: number }): string {
  const width = o.width ?? 760;
  const height = o.height ?? 360;
  const left = 70;
  const right = 180;
  const top = 40;
  const bottom = 50;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const xs = o.series.flatMap((s) => s.points.map((p) => p.x));
  const ys = o.series.flatMap((s) => s.points.map((p) => p.y));
  const xMax = Math.max(...xs, 1);
  const yMax = Math.max(...ys, 1) * 1.05;
  const px = (v: number) => left + (v / xMax) * plotW;
  const py = (v: number) => top + plotH - (v / yMax) * plotH;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ${FONT} font-size="12">`);
  out.push(`<rect width="100%" height="100%" fill="white"/>`);
  out.push(`<text x="${left + plotW / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">${esc(o.title)}</text>`);
  for (let i = 0; i <= 5; i++) {
    const yv = (yMax / 5) * i;
    out.push(`<line x1="${left}" y1="${py(yv).toFixed(1)}" x2="${left + plotW}" y2="${py(yv).toFixed(1)}" stroke="#e5e7eb"/>`);
    out.push(`<text x="${left - 6}" y="${py(yv).toFixed(1)}" text-anchor="end" dominant-baseline="middle" fill="#555">${fmt(yv)}</text>`);
    const xv = (xMax / 5) * i;
    out.push(`<text x="${px(xv).toFixed(1)}" y="${top + plotH + 16}" text-anchor="middle" fill="#555">${fmt(xv)}</text>`);
  }
  out.push(`<text x="${left + plotW / 2}" y="${height - 10}" text-anchor="middle" fill="#333">${esc(o.xUnit)}</text>`);
  out.push(`<text x="14" y="${top + plotH / 2}" text-anchor="middle" fill="#333" transform="rotate(-90 14 ${top + plotH / 2})">${esc(o.yUnit)}</text>`);
  o.series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const d = s.points.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' ');
    out.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${d}"/>`);
    out.push(`<rect x="${left + plotW + 12}" y="${top + i * 18}" width="10" height="10" fill="${color}"/>`);
    out.push(`<text x="${left + plotW + 26}" y="${top + i * 18 + 9}">${esc(s.label)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n');
}
