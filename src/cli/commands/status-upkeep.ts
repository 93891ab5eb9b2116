// Two sections of `timeout-center status` about the databases themselves rather than the queue:
// what holds back VACUUM there (operations/vacuum-horizon.ts, docs/vacuum-horizon.md), and the
// schema contract with the versions the fleet runs (src/release/, docs/upgrading.md). Also the
// section contract every section follows, and the indent helper they share.
import { blindNotes, horizonsOf, type Fleet } from './status-read.js';
import { formatAge, horizonSeverity, oldestByKind } from '../../operations/vacuum-horizon.js';
import { CENTER } from '../../stores/store-directory.js';
import { VERSION } from '../../version.js';
import { table } from './common.js';

/** One part of the status screen: its text (undefined: nothing to show) and its --json fields. */
export interface StatusSection {
  name: string;
  text(fleet: Fleet): string | undefined;
  json(fleet: Fleet): Record<string, unknown>;
}

export function indent(text: string): string {
  return text
    .split('\n')
    .map((l) => `  ${l}`)
    .join('\n');
}

/** What holds back VACUUM in each database (docs/vacuum-horizon.md): the oldest holder of each
 *  kind, those past alerts.vacuumHorizonMs / Xids marked (and named with what to do among the
 *  problems above), and a database whose horizon could not be read. */
export const horizonSection: StatusSection = {
  name: 'vacuum horizon',
  text(fleet) {
    const limits = fleet.horizonLimits;
    const over = horizonsOf(fleet).flatMap(([, h]) => h.holders.filter((holder) => horizonSeverity(holder, limits)));
    // The oldest of each kind past the limits or held for a minute or more (or of unknown start): a
    // query running now holds a snapshot too, for a moment.
    const rows = horizonsOf(fleet).flatMap(([database, h]) =>
      oldestByKind(h.holders)
        .filter((holder) => horizonSeverity(holder, limits) || holder.seconds === null || holder.seconds >= 60)
        .map((holder) => ({ database, h: holder })),
    );
    const head =
      over.length === 0
        ? `Vacuum horizon: nothing has held back VACUUM longer than ${formatAge(limits.warnSeconds)} (${limits.warnXids.toLocaleString('en-US')} transactions for a slot or standby)`
        : `Vacuum horizon: ${over.length} holder${over.length === 1 ? '' : 's'} past ${formatAge(limits.warnSeconds)}: see the problems above and docs/vacuum-horizon.md`;
    const out = [head];
    if (rows.length > 0) {
      out.push(
        indent(
          table(rows, [
            { header: 'database', value: (r) => r.database },
            { header: 'holder', value: (r) => r.h.holder },
            { header: 'who', value: (r) => (r.h.slot ? `slot ${r.h.slot}` : r.h.gid ? `gid ${r.h.gid}` : `pid ${r.h.pid}`), max: 40 },
            { header: 'application', value: (r) => r.h.applicationName ?? '', max: 30 },
            { header: 'state', value: (r) => r.h.state ?? '' },
            { header: 'for', value: (r) => (r.h.seconds === null ? '?' : formatAge(r.h.seconds)), align: 'right' },
            { header: 'transactions', value: (r) => r.h.xidAge, align: 'right' },
            { header: '', value: (r) => horizonSeverity(r.h, limits)?.toUpperCase() ?? '' },
          ]),
        ),
      );
    }
    for (const b of fleet.businessHorizons) if (!b.ok) out.push(`  ${b.store}: could not read its horizon: ${b.error}`);
    for (const note of blindNotes(fleet)) out.push(`  ${note}`);
    return out.join('\n');
  },
  json(fleet) {
    return {
      vacuumHorizon: horizonsOf(fleet).map(([database, h]) => ({
        database,
        role: h.role,
        seesAllSessions: h.seesAllSessions,
        holders: h.holders.map((holder) => ({ ...holder, severity: horizonSeverity(holder, fleet.horizonLimits) })),
      })),
      vacuumHorizonUnread: fleet.businessHorizons.flatMap((b) => (b.ok ? [] : [{ database: b.store, error: b.error }])),
    };
  },
};

// The schema contract and the versions that run (docs/upgrading.md).
export const versionsSection: StatusSection = {
  name: 'versions',
  text(fleet) {
    const out: string[] = [];
    for (const d of fleet.databases) {
      const r = d.ok ? d.value.release : undefined;
      if (!r) continue;
      const prefix = fleet.multi ? `${d.store}: ` : '';
      const c = r.contract;
      out.push(
        c
          ? `${prefix}Schema: migration ${String(c.schemaVersion).padStart(4, '0')}${c.migratedBy ? ` (migrated by ${c.migratedBy})` : ''}, runs timeout-center ${c.oldestCode} and later; this status is ${VERSION}`
          : `${prefix}Schema: missing`,
      );
      if (r.processes.length > 0) {
        const versions = new Set(r.processes.map((p) => p.version ?? 'before 1.0.0'));
        out.push(`  Live processes: ${r.processes.length}${versions.size > 1 ? ` running ${versions.size} versions (an upgrade in progress?)` : ''}`);
        out.push(
          indent(
            table(r.processes, [
              { header: 'role', value: (p) => p.role, max: 48 },
              { header: 'version', value: (p) => p.version ?? 'before 1.0.0' },
              { header: 'host', value: (p) => p.host },
              { header: 'pid', value: (p) => (p.source === 'connections' ? `${p.connections} conn.` : p.pid) },
            ]),
          ),
        );
      }
    }
    return out.length ? out.join('\n') : undefined;
  },
  json(fleet) {
    const center = fleet.databases.find((d) => d.store === CENTER);
    const r = center?.ok ? center.value.release : undefined;
    return { version: VERSION, schema: r?.contract ?? null, processes: r?.processes ?? [] };
  },
};
