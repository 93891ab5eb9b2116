// `timeout-center purge`: runs retention now (the leading coordinator also runs it every
// retention.intervalMs): deletes done and cancelled timeouts and reduced scans (with their
// shards) older than the configured ages, in short batches. Failed timeouts are kept.
// Ages come from the flags, else from the config file's retention section (when --config or
// TIMEOUT_CENTER_CONFIG names one), else from the defaults in src/config.ts.
import type { Command } from 'commander';
import { Option } from 'commander';
import { configSchema, parseConfig, readConfigFile, type RetentionConfig } from '../../config.js';
import { purgeAudited } from '../../operations/actions.js';
import { countPurgeable } from '../../retention/retention.js';
import {
  actorOption,
  databaseOption,
  defaultActor,
  formatSeconds,
  jsonOption,
  parseDuration,
  parseLimit,
  print,
  printJson,
  withDatabase,
  type DbOptions,
} from './common.js';

interface PurgeCliOptions extends DbOptions {
  actor?: string;
  json?: boolean;
  config?: string;
  doneAfter?: number;
  scansAfter?: number;
  batchSize?: number;
  dryRun?: boolean;
}

export function registerPurge(program: Command): void {
  program
    .command('purge')
    .description('delete done/cancelled timeouts and reduced scans (with shards) older than the retention ages, in short batches; failed timeouts are kept')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .addOption(new Option('-c, --config <file>', 'read retention ages from this config file').env('TIMEOUT_CENTER_CONFIG'))
    .option('--done-after <age>', 'purge done/cancelled timeouts finished longer ago than this (e.g. 7d, 12h, 30m)', (v) => parseDuration(v, '--done-after'))
    .option('--scans-after <age>', 'purge reduced scans (and their shards) older than this', (v) => parseDuration(v, '--scans-after'))
    .option('--batch-size <n>', 'timeouts deleted per statement', (v) => parseLimit(v, '--batch-size'))
    .option('--dry-run', 'only count what would be deleted')
    .addOption(actorOption())
    .action(async (opts: PurgeCliOptions) => {
      // Only the retention section is read: purge needs no Redis URL and no valid kinds beyond
      // what the file's own validation demands.
      const retention: RetentionConfig = opts.config
        ? parseConfig(readConfigFile(opts.config), opts.config).retention
        : configSchema.shape.retention.parse(undefined);
      const options = {
        doneAfterMs: opts.doneAfter ?? retention.doneAfterMs,
        scansAfterMs: opts.scansAfter ?? retention.scansAfterMs,
        batchSize: opts.batchSize ?? retention.batchSize,
        scanBatchSize: retention.scanBatchSize,
      };
      await withDatabase(opts, async (_db, pool) => {
        if (opts.dryRun) {
          const counts = await countPurgeable(pool, options);
          if (opts.json) printJson({ dryRun: true, ...options, wouldDelete: counts });
          else {
            print(
              `would delete ${counts.timeouts} done/cancelled timeouts finished over ${formatSeconds(options.doneAfterMs / 1000)} ago and ` +
                `${counts.scans} reduced scans over ${formatSeconds(options.scansAfterMs / 1000)} old (with their shards)`,
            );
          }
          return;
        }
        let stop = false;
        const onSignal = () => {
          stop = true; // finish the batch in progress, then stop
        };
        process.once('SIGINT', onSignal);
        process.once('SIGTERM', onSignal);
        try {
          const result = await purgeAudited(pool, options, opts.actor ?? defaultActor(), { shouldStop: () => stop });
          if (opts.json) printJson({ dryRun: false, ...options, deleted: result, interrupted: stop });
          else {
            const rate = result.ms > 0 ? Math.round((result.timeouts / result.ms) * 1000) : 0;
            print(
              `deleted ${result.timeouts} timeouts, ${result.scans} scans (with their shards) and ${result.workers} stopped workers ` +
                `in ${result.batches} batches, ${formatSeconds(result.ms / 1000)}${result.timeouts > 0 ? ` (${rate} timeouts/s)` : ''}${stop ? '; interrupted' : ''}`,
            );
          }
        } finally {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
        }
      });
    });
}
