// Shard channel inside one process, for the embedded mode (demo, single machine): the same
// at-least-once contract as the Redis Streams channel (deliveries stay pending until acked, a
// consumer's unacked deliveries can be reclaimed by another), held in memory. Losing it is fine:
// like a Redis restart, the first checkLostAndMark() answers true and the coordinator republishes
// what PostgreSQL says is queued. Like the Redis channel, messages wait per kind and a consumer
// receives (and reclaims) only the kinds it asks for.
import type { ShardChannel, ShardDelivery, ShardMessage } from './channel.js';

interface Pending {
  message: ShardMessage;
  consumer: string;
  deliveredAt: number;
}

export class InProcessChannel implements ShardChannel {
  private readonly waiting: { id: string; message: ShardMessage }[] = [];
  private readonly pending = new Map<string, Pending>();
  private readonly drainedOwnPending = new Set<string>();
  private readonly receivers = new Set<() => void>();
  private nextId = 1;
  private marked = false;
  private closed = false;

  async init(_kinds: readonly string[]): Promise<void> {}

  async publish(messages: readonly ShardMessage[]): Promise<void> {
    if (this.closed) throw new Error('in-process channel is closed');
    for (const message of messages) this.waiting.push({ id: `${Date.now()}-${this.nextId++}`, message: { ...message } });
    if (messages.length > 0) for (const wake of [...this.receivers]) wake();
  }

  async receive(consumer: string, kinds: readonly string[], count: number, blockMs: number): Promise<ShardDelivery[]> {
    const served = new Set(kinds);
    const ready = () => this.waiting.some((w) => served.has(w.message.kind));
    if (!this.drainedOwnPending.has(consumer)) {
      // Same contract as XREADGROUP ... 0: a consumer first gets back what it left unacked.
      this.drainedOwnPending.add(consumer);
      const own = [...this.pending].filter(([, p]) => p.consumer === consumer && served.has(p.message.kind));
      if (own.length > 0) return own.map(([id, p]) => ({ deliveryId: id, message: p.message, reclaimed: true }));
    }
    if (!ready() && !this.closed && blockMs > 0) {
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.receivers.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, blockMs);
        this.receivers.add(wake);
      });
    }
    const taken: { id: string; message: ShardMessage }[] = [];
    for (let i = 0; i < this.waiting.length && taken.length < count;) {
      if (served.has(this.waiting[i]!.message.kind)) taken.push(...this.waiting.splice(i, 1));
      else i += 1;
    }
    const now = Date.now();
    return taken.map(({ id, message }) => {
      this.pending.set(id, { message, consumer, deliveredAt: now });
      return { deliveryId: id, message, reclaimed: false };
    });
  }

  async reclaim(consumer: string, kinds: readonly string[], minIdleMs: number, count: number): Promise<ShardDelivery[]> {
    const now = Date.now();
    const out: ShardDelivery[] = [];
    for (const [id, p] of this.pending) {
      if (out.length >= count) break;
      if (p.consumer === consumer || now - p.deliveredAt < minIdleMs || !kinds.includes(p.message.kind)) continue;
      p.consumer = consumer;
      p.deliveredAt = now;
      out.push({ deliveryId: id, message: p.message, reclaimed: true });
    }
    return out;
  }

  async holders(kinds: readonly string[]): Promise<string[]> {
    return [...new Set([...this.pending.values()].filter((p) => kinds.includes(p.message.kind)).map((p) => p.consumer))];
  }

  async releaseConsumer(consumer: string, kinds: readonly string[]): Promise<ShardMessage[]> {
    const released: ShardMessage[] = [];
    for (const [id, p] of [...this.pending]) {
      if (p.consumer !== consumer || !kinds.includes(p.message.kind)) continue;
      this.pending.delete(id);
      released.push(p.message);
    }
    return released;
  }

  async ack(deliveries: readonly ShardDelivery[]): Promise<void> {
    for (const d of deliveries) this.pending.delete(d.deliveryId);
  }

  async checkLostAndMark(): Promise<boolean> {
    if (this.marked) return false;
    this.marked = true;
    return true;
  }

  async removeConsumer(consumer: string, _kinds: readonly string[]): Promise<void> {
    this.drainedOwnPending.delete(consumer);
  }

  async depth(): Promise<{ waiting: number; pending: number }> {
    return { waiting: this.waiting.length, pending: this.pending.size };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const wake of [...this.receivers]) wake();
  }
}
