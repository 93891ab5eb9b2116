// `timeout-center cancel <kind> <bizId...>`: cancels the pending timeout of each business object,
// through the same cancel() the business API uses, in one transaction. A cancelled timeout never
// acts; a dispatched one (in a worker's hands) cannot be cancelled any more.
import type { Command } from 'commander';
import { cancel, TimeoutInputError } from '../../schedule.js';
import { assertKind, databaseOption, inputError, jsonOption, print, printJson, withDatabase, type DbOptions } from './common.js';

export function registerCancel(program: Command): void {
  program
    .command('cancel')
    .description('cancel the pending timeout of each business object (e.g. an order paid outside the normal path)')
    .argument('<kind>', 'timeout kind, e.g. order.unpaid')
    .argument('<bizId...>', 'business object id(s)')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .action(async (kind: string, bizIds: string[], opts: DbOptions & { json?: boolean }) => {
      for (const id of bizIds) {
        if (id.length === 0 || id.length > 200) throw inputError(`bizId must be 1 to 200 characters, got ${JSON.stringify(id)}`);
      }
      await withDatabase(opts, async (db) => {
        await assertKind(db, kind);
        const unique = [...new Set(bizIds)];
        const outcome = await db.transaction().execute(async (trx) => {
          const cancelled: string[] = [];
          const notLive: string[] = [];
          for (const bizId of unique) {
            try {
              ((await cancel(trx, kind, bizId)) ? cancelled : notLive).push(bizId);
            } catch (err) {
              if (err instanceof TimeoutInputError) throw inputError(err.message);
              throw err;
            }
          }
          return { cancelled, notLive };
        });
        if (opts.json) {
          printJson({ kind, ...outcome });
          return;
        }
        const lines = [`cancelled ${outcome.cancelled.length} ${kind} timeout${outcome.cancelled.length === 1 ? '' : 's'}`];
        if (outcome.cancelled.length > 0) lines[0] += `: ${outcome.cancelled.join(', ')}`;
        if (outcome.notLive.length > 0) {
          lines.push(
            `not cancelled (too late: a worker holds it, or it is already done, failed or cancelled; or never scheduled): ${outcome.notLive.join(', ')}`,
          );
        }
        print(lines.join('\n'));
      });
    });
}
