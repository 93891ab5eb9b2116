// Settle on read for every kind (issue 33). Skeleton: today it only runs timeout_center.settle.
import type pg from 'pg';
import type { Logger } from 'pino';
import type { LoadedConfig } from '../config.js';
import type { Executor, ScheduleInput } from '../schedule.js';
import type { ShardHandler } from '../worker/handler-contract.js';
import { settle, type SettleOptions, type SettleResult } from './settle.js';

export interface SettlerOptions {
  config: LoadedConfig;
  pool: pg.Pool;
  stores?: Record<string, Executor> | undefined;
  logger?: Logger | undefined;
}

export class Settler {
  private readonly registered = new Map<string, ShardHandler>();
  constructor(private readonly options: SettlerOptions) {}

  registerHandler(kind: string, handler: ShardHandler): this {
    this.registered.set(kind, handler);
    return this;
  }

  settle(kind: string, bizId: ScheduleInput['bizId'], options: SettleOptions = {}): Promise<SettleResult> {
    return settle(this.options.pool, kind, bizId, options);
  }

  settleIn(db: Executor, kind: string, bizId: ScheduleInput['bizId'], options: SettleOptions = {}): Promise<SettleResult> {
    return settle(db, kind, bizId, options);
  }

  async close(): Promise<void> {}
}
