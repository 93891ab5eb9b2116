// The Service contract (src/service.ts): idempotent, awaitable, serialised transitions, restartable;
// groups start in order, stop in reverse, and every stop runs even when another fails.
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { BaseService, periodic, service, ServiceGroup } from '../../src/service.js';

const logger = pino({ level: 'silent' });

class Recorder extends BaseService {
  constructor(
    readonly name: string,
    private readonly log: string[],
    private readonly failOn?: 'start' | 'stop',
  ) {
    super();
  }
  protected async onStart(): Promise<void> {
    await new Promise((r) => setTimeout(r, 5));
    if (this.failOn === 'start') throw new Error(`${this.name} cannot start`);
    this.log.push(`start ${this.name}`);
  }
  protected async onStop(): Promise<void> {
    if (this.failOn === 'stop') throw new Error(`${this.name} cannot stop`);
    this.log.push(`stop ${this.name}`);
  }
}

describe('BaseService', () => {
  it('start and stop are idempotent and serialised; a stopped service starts again', async () => {
    const log: string[] = [];
    const s = new Recorder('a', log);
    await Promise.all([s.start(), s.start(), s.stop(), s.stop(), s.start()]);
    expect(log).toEqual(['start a', 'stop a', 'start a']);
    expect(s.isRunning).toBe(true);
    await s.stop();
    await s.stop();
    expect(log).toEqual(['start a', 'stop a', 'start a', 'stop a']);
  });

  it('a failed start leaves it stopped, and a later start tries again', async () => {
    let fail = true;
    const s = service(
      'flaky',
      () => {
        if (fail) throw new Error('no');
      },
      () => {},
    );
    await expect(s.start()).rejects.toThrow('no');
    fail = false;
    await s.start();
  });
});

describe('ServiceGroup', () => {
  it('starts in order, stops in reverse, each stop running even if another fails', async () => {
    const log: string[] = [];
    const group = new ServiceGroup('g', [new Recorder('a', log), new Recorder('b', log, 'stop'), new Recorder('c', log)], logger);
    await group.start();
    await group.stop();
    expect(log).toEqual(['start a', 'start b', 'start c', 'stop c', 'stop a']);
  });

  it('a start that fails stops what started, in reverse, and throws', async () => {
    const log: string[] = [];
    const group = new ServiceGroup('g', [new Recorder('a', log), new Recorder('b', log), new Recorder('c', log, 'start')], logger);
    await expect(group.start()).rejects.toThrow('c cannot start');
    expect(log).toEqual(['start a', 'start b', 'stop b', 'stop a']);
    expect(group.isRunning).toBe(false);
  });
});

describe('periodic', () => {
  it('runs one at a time, and stop waits for the run in progress', async () => {
    let running = 0;
    let most = 0;
    let runs = 0;
    const s = periodic(
      'tick',
      5,
      async () => {
        running += 1;
        most = Math.max(most, running);
        await new Promise((r) => setTimeout(r, 20));
        running -= 1;
        runs += 1;
      },
      () => {},
    );
    await s.start();
    await new Promise((r) => setTimeout(r, 60));
    await s.stop();
    expect(running).toBe(0);
    expect(most).toBe(1);
    const after = runs;
    await new Promise((r) => setTimeout(r, 30));
    expect(runs).toBe(after);
  });
});
