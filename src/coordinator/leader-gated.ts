// Duties that run only while this coordinator leads (River's queue_maintainer_leader): a group of
// services started on each election and stopped on each deposition, with hooks that run before the
// start (forget the previous term's memory) and after the stop (clear the leader's gauges).
// Deposition does not wait for the stop: the event comes from the leadership loop, which must go
// on renewing or acquiring; the group's transitions run in order anyway.
import type { Logger } from 'pino';
import { BaseService, type Service } from '../service.js';
import type { Leadership } from './leadership.js';

export interface LeaderGatedOptions {
  leadership: Leadership;
  group: Service;
  logger: Logger;
  onElected: (epoch: number) => void;
  onDeposed: () => void;
}

export class LeaderGated extends BaseService {
  readonly name = 'leader-gated duties';

  private readonly elected = (epoch: number): void => {
    this.options.onElected(epoch);
    this.options.group
      .start()
      .catch((err: unknown) => this.options.logger.error({ err }, 'could not start the leader duties; they start again at the next election'));
  };

  private readonly deposed = (): void => {
    this.options.group
      .stop()
      .catch((err: unknown) => this.options.logger.warn({ err }, 'stopping the leader duties failed'))
      .finally(() => this.options.onDeposed());
  };

  constructor(private readonly options: LeaderGatedOptions) {
    super();
  }

  protected async onStart(): Promise<void> {
    this.options.leadership.on('elected', this.elected);
    this.options.leadership.on('deposed', this.deposed);
  }

  /** Off the lead for good (the process stops): the duties stop, awaited. */
  protected async onStop(): Promise<void> {
    this.options.leadership.off('elected', this.elected);
    this.options.leadership.off('deposed', this.deposed);
    await this.options.group.stop();
    this.options.onDeposed();
  }
}
