// Named failpoints for fault tests, in the spirit of TiKV's fail-rs. Off unless the environment
// variable TC_FAILPOINTS names them, and then they cost one Map look-up per hit:
//
//   TC_FAILPOINTS="worker.before-commit=kill;coordinator.after-claim=2*sleep(3000)"
//
// Actions: kill (SIGKILL this process: no cleanup runs), exit(code), sleep(ms), error(message),
// pause (SIGSTOP this process). "N*" limits an action to its first N hits.

type Action = { type: 'kill' } | { type: 'exit'; code: number } | { type: 'sleep'; ms: number } | { type: 'error'; message: string } | { type: 'pause' };

interface Failpoint {
  action: Action;
  remaining: number;
}

export class FailpointError extends Error {
  override name = 'FailpointError';
}

export function parseFailpoints(spec: string | undefined): Map<string, Failpoint> {
  const points = new Map<string, Failpoint>();
  if (!spec) return points;
  for (const part of spec
    .split(';')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^([\w.-]+)=(?:(\d+)\*)?(kill|exit|sleep|error|pause)(?:\((.*)\))?$/.exec(part);
    if (!m) throw new Error(`TC_FAILPOINTS: cannot parse "${part}" (expected name=[N*]kill|exit(code)|sleep(ms)|error(msg)|pause)`);
    const [, name, count, type, arg] = m as unknown as [string, string, string | undefined, string, string | undefined];
    let action: Action;
    if (type === 'exit') action = { type, code: Number(arg ?? 1) };
    else if (type === 'sleep') action = { type, ms: Number(arg ?? 1000) };
    else if (type === 'error') action = { type, message: arg ?? `failpoint ${name}` };
    else action = { type } as Action;
    points.set(name, { action, remaining: count ? Number(count) : Infinity });
  }
  return points;
}

const active = parseFailpoints(process.env['TC_FAILPOINTS']);

/** Marks a point where a fault test may stop, slow or fail this process. */
export async function failpoint(name: string): Promise<void> {
  if (active.size === 0) return;
  const point = active.get(name);
  if (!point || point.remaining <= 0) return;
  point.remaining -= 1;
  const { action } = point;
  process.stderr.write(`failpoint ${name} hit: ${action.type}\n`);
  switch (action.type) {
    case 'kill':
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => {});
      return;
    case 'exit':
      process.exit(action.code);
    // falls through (exit does not return)
    case 'sleep':
      await new Promise((r) => setTimeout(r, action.ms));
      return;
    case 'error':
      throw new FailpointError(action.message);
    case 'pause':
      process.kill(process.pid, 'SIGSTOP');
      return;
  }
}
