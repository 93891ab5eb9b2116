// A wait with a bound, for the steps of a worker's stop that talk to a database which may not
// answer (a store behind a partition): past the bound the caller goes on, and the work is left to
// settle on its own, its result or error ignored.

/** The work's result, or an Error saying `what` got no answer within ms. */
export function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  work.catch(() => {});
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
