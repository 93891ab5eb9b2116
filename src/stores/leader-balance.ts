// Stores shared between coordinators (docs/scale.md): every coordinator process competes for the
// center and every store, so the first one up would lead them all and a coordinator started later
// would lead none. Each process says it is alive in a Redis sorted set (`<prefix>:coordinators`,
// scored by the time of its last word, ttl-fresh entries count), and a process that leads more than
// its share, ceil(leaderships / live coordinators), steps down from one store per round, keeping
// away from it for two lock TTLs, so that a coordinator below its share takes it. Nothing is ever
// refused to a process: a dead coordinator's stores are taken by whoever gets the lock first, within
// its TTL, as before; the balance follows once the dead one's entry ages out.
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Leadership } from '../coordinator/leadership.js';
import { periodic, service, type Service } from '../service.js';

export interface LeaderBalanceOptions {
  redis: Redis | Cluster;
  /** The sorted set of live coordinators. */
  key: string;
  coordinatorId: string;
  /** The leader lock's TTL: how long an entry counts, and the round's period. */
  ttlMs: number;
  logger: Logger;
}

export class LeaderBalance {
  /** Name -> leadership; the center's first, never handed away by the balance. */
  private readonly members = new Map<string, Leadership>();
  private readonly awayUntil = new Map<string, number>();
  private live = 1;

  constructor(private readonly o: LeaderBalanceOptions) {}

  /** Adds a leadership to the count; the first one added (the center's) is handed over last. */
  register(name: string, leadership: Leadership): void {
    this.members.set(name, leadership);
  }

  /** False while this process keeps away from a store it handed over. */
  mayAcquire(name: string): boolean {
    return (this.awayUntil.get(name) ?? 0) <= Date.now();
  }

  /** ceil(leaderships / live coordinators). */
  get share(): number {
    return Math.ceil(this.members.size / Math.max(1, this.live));
  }

  /** The rounds, every half TTL; leaving the set when stopped. */
  service(): Service {
    const every = Math.max(500, Math.floor(this.o.ttlMs / 2));
    const rounds = periodic(
      'leader balance',
      every,
      () => this.round(),
      (err) => this.o.logger.warn({ err }, 'leader balance round failed; will retry'),
    );
    return service(
      'leader balance',
      () => rounds.start(),
      async () => {
        await rounds.stop();
        await this.leave();
      },
    );
  }

  /** One round: say this process is alive, count the live ones, hand one store over if above share. */
  async round(): Promise<void> {
    const now = Date.now();
    const { redis, key, coordinatorId, ttlMs } = this.o;
    const [, , [, count]] = (await redis
      .multi()
      .zadd(key, now, coordinatorId)
      .zremrangebyscore(key, '-inf', now - ttlMs)
      .zcard(key)
      .pexpire(key, ttlMs * 10)
      .exec()) as [unknown, unknown, [unknown, number], unknown];
    this.live = Math.max(1, count);
    const led = [...this.members].filter(([, l]) => l.isLeader);
    if (led.length <= this.share) return;
    // The last store led (the center is first in the map and is handed over last).
    const [name, leadership] = led.at(-1)!;
    this.awayUntil.set(name, now + 2 * ttlMs);
    this.o.logger.info(
      { store: name, leading: led.length, share: this.share, coordinators: this.live },
      `handing store ${name} to another coordinator: this one leads ${led.length}, its share is ${this.share} of ${this.members.size} with ${this.live} coordinators`,
    );
    leadership.stepDown(`rebalancing: ${this.live} coordinators share ${this.members.size} leaderships`);
  }

  /** Leaves the set, so the others count one fewer at once. */
  async leave(): Promise<void> {
    await this.o.redis.zrem(this.o.key, this.o.coordinatorId).catch(() => {});
  }
}
