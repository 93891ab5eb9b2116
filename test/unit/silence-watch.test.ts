// The PostgreSQL silence watch (src/db/silence-watch.ts) on a stream: a connection that keeps
// answering is never dropped however long the statement, one that goes quiet with a statement out
// is dropped once the bound passed, and an idle one (nothing out) never.
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { SilenceWatch, SilentConnectionError } from '../../src/db/silence-watch.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function watched(ms: number): { stream: PassThrough; watch: SilenceWatch; destroyed: () => Error | undefined } {
  const stream = new PassThrough();
  stream.resume();
  let error: Error | undefined;
  stream.on('error', (err) => (error = err));
  return { stream, watch: new SilenceWatch(stream, ms), destroyed: () => (stream.destroyed ? (error ?? new Error('destroyed')) : undefined) };
}

describe('SilenceWatch', () => {
  it('keeps a connection that answers, however long the statement; drops it once it is silent past the bound', async () => {
    const { stream, watch, destroyed } = watched(300);
    const settled = watch.begin();
    for (let i = 0; i < 10; i += 1) {
      await sleep(100);
      stream.write('x'); // rows keep coming: 1 s in all, over three times the bound
    }
    expect(destroyed()).toBeUndefined();
    const quietAt = Date.now();
    while (!destroyed() && Date.now() - quietAt < 2000) await sleep(10);
    const err = destroyed();
    expect(err).toBeInstanceOf(SilentConnectionError);
    expect((err as SilentConnectionError).code).toBe('08006');
    expect(Date.now() - quietAt).toBeGreaterThanOrEqual(280);
    expect(Date.now() - quietAt).toBeLessThan(800);
    settled();
  });

  it('never drops an idle connection, and counts from the statement, not from the last byte before it', async () => {
    const { stream, watch, destroyed } = watched(200);
    stream.write('x');
    await sleep(400); // idle, nothing out
    expect(destroyed()).toBeUndefined();
    const settled = watch.begin();
    await sleep(100);
    stream.write('answer');
    settled();
    await sleep(400); // settled: nothing out again
    expect(destroyed()).toBeUndefined();
  });
});
