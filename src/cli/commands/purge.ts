// `timeout-center purge`: runs retention now (the leading coordinator also runs it every
// retention.intervalMs): deletes done and cancelled timeouts and reduced scans (with their
// shards) older than the configured ages, in short batches. Failed timeouts are kept.
// Ages come from the flags, else from the config file's retention section (when --config or
// TIMEOUT_CENTER_CONFIG names one), else from the defaults in src/config.ts. With a config that
// names stores, the center and every store (or --store) purge, each audited (copied to the center).
import type { Command } from 'commander';
import { configSchema, type RetentionConfig } from '../../config.js';
import { partial } from '../exit-codes.js';
import { purgeAudited } from '../../operations/actions.js';
import { countPurgeable, type PurgeResult } from '../../retention/retention.js';
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
  readConfig,
  type DbOptions,
} from './common.js';
import { acrossStores, eachStore, forwardAudit, storeOption, withoutAuditFlag } from './across.js';

interface PurgeCliOptions extends DbOptions {
  actor?: string;
  json?: boolean;
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
    .option('--done-after <age>', 'purge done/cancelled timeouts finished longer ago than this (e.g. 7d, 12h, 30m)', (v) => parseDuration(v, '--done-after'))
    .option('--scans-after <age>', 'purge reduced scans (and their shards) older than this', (v) => parseDuration(v, '--scans-after'))
    .option('--batch-size <n>', 'timeouts deleted per statement', (v) => parseLimit(v, '--batch-size'))
    .option('--dry-run', 'only count what would be deleted')
    .addOption(storeOption())
    .addOption(actorOption())
    .action(async (opts: PurgeCliOptions) => {
      // The config (read as every verb reads it: no Redis needed) gives the retention ages.
      const retention: RetentionConfig = readConfig(opts)?.retention ?? configSchema.shape.retention.parse(undefined);
      const options = {
        doneAfterMs: opts.doneAfter ?? retention.doneAfterMs,
        scansAfterMs: opts.scansAfter ?? retention.scansAfterMs,
        batchSize: opts.batchSize ?? retention.batchSize,
        scanBatchSize: retention.scanBatchSize,
      };
      await acrossStores(opts, async (a) => {
        const label = (store: string) => (a.multi ? `store ${store}: ` : '');
        if (opts.dryRun) {
          const answers = await eachStore(a, (_db, pool) => countPurgeable(pool, options));
          if (opts.json) {
            if (!a.multi) printJson({ dryRun: true, ...options, wouldDelete: (answers[0] as { value: unknown }).value });
            else
              printJson({
                dryRun: true,
                ...options,
                stores: answers.map((r) => (r.ok ? { store: r.store, wouldDelete: r.value } : { store: r.store, unreachable: r.error })),
              });
          } else {
            for (const r of answers) {
              print(
                r.ok
                  ? `${label(r.store)}would delete ${r.value.timeouts} done/cancelled timeouts finished over ${formatSeconds(options.doneAfterMs / 1000)} ago and ` +
                      `${r.value.scans} reduced scans over ${formatSeconds(options.scansAfterMs / 1000)} old (with their shards)`
                  : `${label(r.store)}UNREACHABLE (${r.error})`,
              );
            }
          }
          if (answers.some((r) => !r.ok)) partial();
          return;
        }
        let stop = false;
        const onSignal = () => {
          stop = true; // finish the batch in progress, then stop
        };
        process.once('SIGINT', onSignal);
        process.once('SIGTERM', onSignal);
        try {
          // Each database purges its own rows, audited there; a store's record is then copied to
          // the center's audit_log.
          const answers = await eachStore(a, async (_db, pool, d) => {
            const result = await purgeAudited(pool, options, opts.actor ?? defaultActor(), { shouldStop: () => stop });
            return { ...result, auditInCenter: await forwardAudit(a, d.store) };
          });
          if (opts.json) {
            if (!a.multi)
              printJson({
                dryRun: false,
                ...options,
                deleted: withoutAuditFlag((answers[0] as { value: PurgeResult & { auditInCenter: boolean } }).value),
                interrupted: stop,
              });
            else {
              printJson({
                dryRun: false,
                ...options,
                interrupted: stop,
                stores: answers.map((r) => (r.ok ? { store: r.store, deleted: withoutAuditFlag(r.value) } : { store: r.store, unreachable: r.error })),
              });
            }
          } else {
            for (const r of answers) {
              if (!r.ok) {
                print(`${label(r.store)}UNREACHABLE (${r.error}): nothing purged there; its leader's retention purges it when it answers`);
                continue;
              }
              const result = r.value;
              const rate = result.ms > 0 ? Math.round((result.timeouts / result.ms) * 1000) : 0;
              print(
                (result.partitionsDropped > 0
                  ? `${label(r.store)}dropped ${result.partitionsDropped} day(s) of history (about ${result.droppedRows} timeouts); `
                  : '') +
                  `${label(r.store)}deleted ${result.timeouts} timeouts, ${result.scans} scans (with their shards) and ${result.workers} stopped workers ` +
                  `in ${result.batches} batches, ${formatSeconds(result.ms / 1000)}${result.timeouts > 0 ? ` (${rate} timeouts/s)` : ''}${stop ? '; interrupted' : ''}` +
                  (result.auditInCenter ? '' : "; audited in the store (the center's database did not answer: its leader copies the record later)"),
              );
            }
          }
          if (answers.some((r) => !r.ok)) partial();
        } finally {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
        }
      });
    });
}
