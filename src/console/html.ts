// HTML by template literals with escaping by construction: html`...` escapes every interpolated
// value unless it is itself an Html (made by html`` or raw()). No template engine, no build step.
import { formatSeconds as cliFormatSeconds, formatTime as cliFormatTime } from '../format.js';

export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

type Value = Html | string | number | boolean | null | undefined | Date | Value[];

function render(value: Value): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value instanceof Date) return escapeHtml(formatTime(value));
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0]!;
  values.forEach((v, i) => {
    out += render(v) + strings[i + 1]!;
  });
  return new Html(out);
}

/** Trusted markup (our own SVG, constants). Never pass user input. */
export function raw(text: string): Html {
  return new Html(text);
}

/** The CLI's time and duration formats (UTC, "4m 05s"), empty instead of null. */
export function formatTime(d: Date | string | null | undefined): string {
  return cliFormatTime(d) ?? '';
}

export function formatSeconds(seconds: number | null | undefined): string {
  return cliFormatSeconds(seconds) ?? '';
}
