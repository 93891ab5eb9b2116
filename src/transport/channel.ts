// The shard channel: how the coordinator hands shards to workers. PostgreSQL stays the source of
// truth (a shard's row says whether it is queued, running or final), so a channel only has to
// deliver at least once; duplicates are dropped by the worker's lease check.
// Shards are routed by kind: a worker reads only the kinds it serves (worker.kinds), so a shard
// never reaches a worker that would have to hand it back.

export interface ShardMessage {
  shardId: number;
  scanId: number;
  kind: string;
}

/** One delivery of a shard to one worker; ack() once the shard's outcome is committed. */
export interface ShardDelivery {
  readonly message: ShardMessage;
  /** Transport-specific id (a Redis stream entry id). */
  readonly deliveryId: string;
  /** True when this delivery was reclaimed from a consumer that stopped answering. */
  readonly reclaimed: boolean;
}

export interface ShardChannel {
  /** Creates the streams/groups of these kinds as needed. Idempotent. */
  init(kinds: readonly string[]): Promise<void>;
  /** Each message goes to its kind's stream. */
  publish(messages: readonly ShardMessage[]): Promise<void>;
  /** Waits up to blockMs for at most `count` new deliveries of these kinds to this consumer. The
   *  first call instead returns everything the consumer left unacknowledged before a restart (may
   *  exceed `count`). */
  receive(consumer: string, kinds: readonly string[], count: number, blockMs: number): Promise<ShardDelivery[]>;
  /** Takes over deliveries of these kinds idle longer than minIdleMs from other consumers (dead
   *  workers). */
  reclaim(consumer: string, kinds: readonly string[], minIdleMs: number, count: number): Promise<ShardDelivery[]>;
  /** Consumers that hold unacknowledged deliveries of these kinds (the reaper asks PostgreSQL
   *  which of them are gone). */
  holders(kinds: readonly string[]): Promise<string[]>;
  /** Acknowledges (and drops) every delivery of these kinds still pending under a consumer that is
   *  gone, and returns their messages, whose shards the reaper publishes again. */
  releaseConsumer(consumer: string, kinds: readonly string[]): Promise<ShardMessage[]>;
  ack(deliveries: readonly ShardDelivery[]): Promise<void>;
  /** True when the channel lost its state since the coordinator last marked it (e.g. Redis
   *  restarted empty); marks it again. The coordinator then republishes from PostgreSQL. */
  checkLostAndMark(): Promise<boolean>;
  /** Removes a consumer that has left (graceful shutdown) from these kinds' groups. */
  removeConsumer(consumer: string, kinds: readonly string[]): Promise<void>;
  /** Messages waiting to be read plus delivered-but-unacknowledged ones, over every kind this
   *  channel has initialised or published (for metrics). */
  depth(): Promise<{ waiting: number; pending: number }>;
  close(): Promise<void>;
}
