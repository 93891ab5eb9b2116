// `timeout-center cancel <kind> <bizId...>`: cancels the pending timeout of each business object,
// through the same cancel() the business API uses, in one transaction, each cancel audited with
// --actor (operations/: the console's cancel too). A cancelled timeout never acts; a dispatched
// one (in a worker's hands) cannot be cancelled any more.
import type { Command } from 'commander';
import { cancelManyAudited } from '../../operations/actions.js';
import { actorOption, assertKind, databaseOption, defaultActor, inputError, jsonOption, print, printJson, withDatabase, type DbOptions } from './common.js';

export function registerCancel(program: Command): void {
  program
    .command('cancel')
    .description('cancel the pending timeout of each business object (e.g. an order paid outside the normal path)')
    .argument('<kind>', 'timeout kind, e.g. order.unpaid')
    .argument('<bizId...>', 'business object id(s)')
    .addOption(databaseOption())
    .addOption(jsonOption())
    .addOption(actorOption())
    .action(async (kind: string, bizIds: string[], opts: DbOptions & { json?: boolean; actor?: string }) => {
      for (const id of bizIds) {
        if (id.length === 0 || id.length > 200) throw inputError(`bizId must be 1 to 200 characters, got ${JSON.stringify(id)}`);
      }
      await withDatabase(opts, async (db) => {
        await assertKind(db, kind);
        const outcome = await cancelManyAudited(db, kind, bizIds, opts.actor ?? defaultActor());
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
