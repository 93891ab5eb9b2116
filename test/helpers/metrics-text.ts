// The value of one sample in a Prometheus text exposition (a process's /metrics), for tests.

/** The value of the first sample of `name` whose labels include `labels`, e.g.
 *  metric(body, 'tc_leader') or metric(body, 'tc_timeouts_total', { kind: 'x', outcome: 'applied' }). */
export function metric(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const m = /^[^{ ]+(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const have = Object.fromEntries([...(m[1] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[2]);
  }
  return undefined;
}
