// Where each kind's timeouts live (docs/scale.md). The center's database is the store of every kind
// by default; a kind with `store: beside` keeps its timeouts in the business databases its SQL
// handler's route (or database) names, each of them a store with the timeout_center schema, led
// on its own. This module reads that layout from the config; nothing here connects.
import type { Config, KindConfig } from '../config.js';

/** The business databases a beside kind's timeouts live in (its route's, or its one database). */
export function storesOfKind(kind: KindConfig): string[] {
  const h = kind.handler;
  if (kind.store !== 'beside' || h.type !== 'sql') return [];
  if (h.database) return [h.database];
  if (!h.route) return [];
  return h.route.by === 'range' ? [...new Set(h.route.ranges.map((r) => r.database))] : [...new Set(h.route.databases)];
}

/** Store name -> the kinds stored there, for every store other than the center, in name order. */
export function storeLayout(kinds: Config['kinds'], only?: readonly string[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const [name, kind] of Object.entries(kinds)) {
    if (only && !only.includes(name)) continue;
    for (const store of storesOfKind(kind)) out.set(store, [...(out.get(store) ?? []), name]);
  }
  return new Map([...out].sort(([a], [b]) => a.localeCompare(b)));
}

/** The kinds whose timeouts live in the center's database. */
export function centerKinds(kinds: Config['kinds'], only?: readonly string[]): string[] {
  return Object.keys(kinds).filter((k) => kinds[k]!.store !== 'beside' && (!only || only.includes(k)));
}

// A beside kind's shards of store S travel on a stream of their own, `<kind>@<store>` (kind names
// have no '@'), so each store's leader marks and republishes only its own streams, and a worker
// knows from the stream which store a shard is in. The center's kinds keep their stream names.

/** The channel's name for a kind's shards in a store (the kind itself for the center). */
export function streamName(kind: string, store: string | undefined): string {
  return store === undefined ? kind : `${kind}@${store}`;
}

/** The kind and the store (undefined: the center) of a stream name. */
export function parseStreamName(name: string): { kind: string; store: string | undefined } {
  const at = name.lastIndexOf('@');
  return at < 0 ? { kind: name, store: undefined } : { kind: name.slice(0, at), store: name.slice(at + 1) };
}

/** How operators, logs and metrics name a store. */
export const storeLabel = (store: string | undefined): string => store ?? 'center';
