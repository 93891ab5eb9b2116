// A handler's time limit, on both execution paths: the work gets an AbortSignal; `graceMs` after
// the limit the signal aborts, `onExpire` runs (the caller destroys the connection the work may
// still hold: it is never reused) and the call rejects with HandlerTimeoutError. The work may go on
// in the background; `onLate` sees what it resolves to then (to release what it took).
import { HandlerTimeoutError } from './handler-contract.js';

export interface TimeLimit<T> {
  /** Names the handler in the error: "handler of order.unpaid". */
  what: string;
  limitMs: number;
  graceMs: number;
  onExpire?: () => void;
  onLate?: (late: T) => void;
}

export async function withTimeLimit<T>(limit: TimeLimit<T>, work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let expired = false;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      expired = true;
      controller.abort(new HandlerTimeoutError(`${limit.what} ran past its ${limit.limitMs} ms time limit`));
      limit.onExpire?.();
      reject(new HandlerTimeoutError(`${limit.what} ran past its ${limit.limitMs} ms time limit${limit.onExpire ? '; its connection was destroyed' : ''}`));
    }, limit.limitMs + limit.graceMs);
  });
  const running = work(controller.signal);
  try {
    return await Promise.race([running, timedOut]);
  } finally {
    clearTimeout(timer);
    if (expired) running.then((late) => limit.onLate?.(late)).catch(() => {});
  }
}
