// A store's view of the shard channel (docs/scale.md): the coordinator leading a store publishes
// and recovers only that store's shards, on streams of their own (`<kind>@<store>`,
// stores/layout.ts), so that a lost stream is noticed and republished by the store's own leader
// and a worker knows from the stream which store a shard lives in. Each store's view needs a
// channel of its own underneath (its own set of streams to check for loss).
import { streamName } from '../stores/layout.js';
import type { ShardChannel, ShardDelivery, ShardMessage } from './channel.js';

export class StoreChannel implements ShardChannel {
  constructor(
    private readonly base: ShardChannel,
    readonly store: string,
  ) {}

  private names(kinds: readonly string[]): string[] {
    return kinds.map((k) => streamName(k, this.store));
  }

  init(kinds: readonly string[]): Promise<void> {
    return this.base.init(this.names(kinds));
  }

  publish(messages: readonly ShardMessage[]): Promise<void> {
    return this.base.publish(messages.map((m) => ({ ...m, kind: streamName(m.kind, this.store) })));
  }

  receive(consumer: string, kinds: readonly string[], count: number, blockMs: number): Promise<ShardDelivery[]> {
    return this.base.receive(consumer, this.names(kinds), count, blockMs);
  }

  reclaim(consumer: string, kinds: readonly string[], minIdleMs: number, count: number): Promise<ShardDelivery[]> {
    return this.base.reclaim(consumer, this.names(kinds), minIdleMs, count);
  }

  holders(kinds: readonly string[]): Promise<string[]> {
    return this.base.holders(this.names(kinds));
  }

  releaseConsumer(consumer: string, kinds: readonly string[]): Promise<ShardMessage[]> {
    return this.base.releaseConsumer(consumer, this.names(kinds));
  }

  ack(deliveries: readonly ShardDelivery[]): Promise<void> {
    return this.base.ack(deliveries);
  }

  checkLostAndMark(): Promise<boolean> {
    return this.base.checkLostAndMark();
  }

  removeConsumer(consumer: string, kinds: readonly string[]): Promise<void> {
    return this.base.removeConsumer(consumer, this.names(kinds));
  }

  depth(): Promise<{ waiting: number; pending: number }> {
    return this.base.depth();
  }

  close(): Promise<void> {
    return this.base.close();
  }
}
