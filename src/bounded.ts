// A wait with a bound, for a call to a server that may never answer (a partition, a silent
// connection: no reply and no close). Past the bound the caller goes on; the work is left to settle
// on its own, its result or error ignored. The one way the center bounds such a wait: worker stop
// steps, leadership lock commands, readiness checks, the Redis probe.

/** The work's result, or a rejection with Error(message) once `ms` passed without one. */
export function within<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), Math.max(0, ms));
  });
  work.catch(() => {});
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/** The usual message: `${what}: no answer within ${ms} ms`. */
export function noAnswer(what: string, ms: number): string {
  return `${what}: no answer within ${Math.max(0, Math.round(ms))} ms`;
}
