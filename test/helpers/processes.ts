// Spawns the real CLI (dist/cli/main.js) as separate OS processes and keeps track of them, so a
// test can kill one at the worst moment and every process is gone when the file ends.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

export const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

export interface LogLine {
  level?: number;
  msg?: string;
  [key: string]: unknown;
}

export class CliProcess {
  readonly lines: LogLine[] = [];
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private waiters: { test: (l: LogLine) => boolean; resolve: (l: LogLine) => void }[] = [];

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
  ) {
    let buffer = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      buffer += chunk;
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const raw = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        let line: LogLine;
        try {
          line = JSON.parse(raw) as LogLine;
        } catch {
          line = { msg: raw };
        }
        this.lines.push(line);
        this.waiters = this.waiters.filter((w) => (w.test(line) ? (w.resolve(line), false) : true));
      }
    });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
    });
    this.exited = once(child, 'exit').then(([code, signal]) => ({ code: code as number | null, signal: signal as NodeJS.Signals | null }));
  }

  get pid(): number {
    return this.child.pid!;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Resolves with the first log line (past or future) that matches; rejects after timeoutMs. */
  waitFor(test: (l: LogLine) => boolean, timeoutMs = 30_000, what = 'log line'): Promise<LogLine> {
    const seen = this.lines.find(test);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name}: no ${what} within ${timeoutMs} ms; stderr: ${this.stderr.slice(-2000)}`)), timeoutMs);
      this.waiters.push({
        test,
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
      });
    });
  }

  waitForMsg(msg: string | RegExp, timeoutMs?: number): Promise<LogLine> {
    const test = (l: LogLine) => (typeof msg === 'string' ? l.msg === msg : msg.test(String(l.msg)));
    return this.waitFor(test, timeoutMs, `"${String(msg)}"`);
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (this.alive) this.child.kill(signal);
  }

  async stop(timeoutMs = 15_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (!this.alive) return this.exited;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.kill('SIGKILL'), timeoutMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

const running = new Set<CliProcess>();

/** cli: another build of the CLI (the bench's --ref runs an earlier checkout beside this one). */
export function spawnCli(name: string, args: string[], env: Record<string, string | undefined>, cli = CLI): CliProcess {
  const child = spawn(process.execPath, [cli, ...args], {
    env: { ...process.env, LOG_LEVEL: undefined, ...env } as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const proc = new CliProcess(name, child);
  running.add(proc);
  void proc.exited.then(() => running.delete(proc));
  return proc;
}

/** Runs the CLI to completion (migrate, bad-input checks). */
export async function runCli(args: string[], env: Record<string, string | undefined>, timeoutMs = 30_000, cli = CLI) {
  const proc = spawnCli(`timeout-center ${args[0] ?? ''}`, args, env, cli);
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const { code } = await proc.exited;
  clearTimeout(timer);
  return { code, stderr: proc.stderr, lines: proc.lines };
}

/** Kills everything still running; returns the names of what leaked, so afterAll can fail on it. */
export async function killAll(): Promise<string[]> {
  const leaked = [...running].filter((p) => p.alive).map((p) => `${p.name} (pid ${p.pid})`);
  for (const p of running) p.kill('SIGKILL');
  await Promise.all([...running].map((p) => p.exited));
  return leaked;
}
