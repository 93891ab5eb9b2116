import { loadavg } from 'node:os';
import type { Reporter, TestModule } from 'vitest/node';

/**
 * Names the test files still running after a while, every two minutes, so a CI log cut off at
 * its time limit says which file was waiting (the default reporter prints a file only when it ends).
 */
export default class SlowFileReporter implements Reporter {
  private readonly started = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;

  onTestRunStart(): void {
    this.timer = setInterval(() => this.report(), 120_000);
    this.timer.unref();
  }

  onTestModuleStart(module: TestModule): void {
    this.started.set(module.moduleId, Date.now());
  }

  onTestModuleEnd(module: TestModule): void {
    this.started.delete(module.moduleId);
  }

  onTestRunEnd(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private report(): void {
    const now = Date.now();
    const slow = [...this.started].filter(([, at]) => now - at > 240_000);
    if (slow.length === 0) return;
    const files = slow.map(([id, at]) => `${id.replace(process.cwd() + '/', '')} (${Math.round((now - at) / 1000)} s)`);
    process.stderr.write(`[slow files] still running: ${files.join(', ')}; load ${loadavg()[0]!.toFixed(1)}\n`);
  }
}
