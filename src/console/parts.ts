// The pieces every page is made of: the request's context, the CSRF field, a one-button action
// form, and the table cells most tables share.
import { html, type Html } from './html.js';

export interface PageContext {
  base: string;
  actor: string;
  csrf: string;
  readOnly: boolean;
  /** The result of the last action (after its redirect), shown once at the top. */
  flash?: { ok: boolean; text: string } | undefined;
  /** With a config that names stores: `center` and every store (rows then name their store). */
  stores?: string[] | undefined;
}

export function csrfField(ctx: PageContext): Html {
  return html`<input type="hidden" name="_csrf" value="${ctx.csrf}" />`;
}

/** A one-button form posting to an action; `back` is where the result is shown. */
export function actionButton(ctx: PageContext, action: string, label: string, back: string, fields: Record<string, string> = {}): Html {
  return html`<form class="inline" method="post" action="${ctx.base}${action}">
    ${csrfField(ctx)}<input
      type="hidden"
      name="back"
      value="${back}"
    />${Object.entries(fields).map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}" />`)}<button type="submit">${label}</button>
  </form>`;
}

export const num = (v: number | null | undefined) => html`<td class="n">${v ?? ''}</td>`;
export const stateCell = (s: string) => html`<td class="state-${s}">${s}</td>`;
