// The audit trail (timeout_center.audit_log): who did what, when, newest first; an action on a
// store's timeouts names the store (copied from the store, stores/audit-outbox.ts).
import type { Queryable } from '../flow/kind-controls.js';

export interface AuditEntry {
  id: number;
  at: Date;
  actor: string;
  action: string;
  kind: string | null;
  target: string | null;
  details: Record<string, unknown>;
  /** The store whose rows the action changed (copied from its audit_log, sql/0015); null: the
   *  center's own. */
  store: string | null;
}

export async function listAudit(db: Queryable, opts: { limit: number; kind?: string | undefined; action?: string | undefined }): Promise<AuditEntry[]> {
  const { rows } = await db.query<AuditEntry>(
    `SELECT id, at, actor, action, kind, target, details, store FROM timeout_center.audit_log
      WHERE ($2::text IS NULL OR kind = $2) AND ($3::text IS NULL OR action = $3)
      ORDER BY id DESC LIMIT $1`,
    [opts.limit, opts.kind ?? null, opts.action ?? null],
  );
  return rows;
}
