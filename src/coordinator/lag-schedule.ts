// When the leader measures the backlog's lag (the tc_backlog gauges and the lag SLA alert). The
// measure reads every due row (about 150 ms at 1,000,000), so a flood mapped from a count ahead of
// its instant puts it off by one interval: nothing of that flood is late when it becomes due, and
// its first shards are claiming then. A deferral never holds the measure back past two intervals
// since the last one, or a steady stream of instants, each mapped ahead, would freeze the gauges.

/** Whether the lag check runs now (all times in ms on one clock). */
export function lagCheckDue(now: number, lastCheckAt: number, notBefore: number, intervalMs: number): boolean {
  if (now - lastCheckAt < intervalMs) return false;
  return now >= notBefore || now - lastCheckAt >= 2 * intervalMs;
}

/** The notBefore of a flood that becomes due untilMs from now: one interval after its instant. */
export function deferredUntil(now: number, untilMs: number, intervalMs: number): number {
  return now + Math.max(0, untilMs) + intervalMs;
}
