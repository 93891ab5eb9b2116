// `timeout-center cancel <kind> <bizId...>`: cancels the pending timeout of each business object,
// through the same cancel() the business API uses, in one transaction per database, each cancel
// audited with --actor (operations/: the console's cancel too). A cancelled timeout never acts; a
// dispatched one (in a worker's hands) cannot be cancelled any more. With a config, a kind stored
// beside its orders is cancelled in the store its route picks for each id, and the audit rows are
// copied to the center's audit_log.
import type { Command } from 'commander';
import { sql, type Kysely } from 'kysely';
import type { Database } from '../../db/schema.js';
import { cancelManyAudited } from '../../operations/actions.js';
import { placeBizIds, type Placement } from '../../stores/place-biz-ids.js';
import { CENTER } from '../../stores/store-directory.js';
import { actorOption, assertKind, databaseOption, defaultActor, inputError, jsonOption, print, printJson, type DbOptions } from './common.js';
import { acrossStores, eachStore, forwardAudit, type Across } from './across.js';
import { partial } from '../exit-codes.js';

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
      const ids = [...new Set(bizIds)];
      await acrossStores(opts, async (a) => {
        const placement = await place(a, kind, ids);
        const stores = [...placement.byStore.keys()];
        const answers = await eachStore({ ...a, stores }, async (db, _pool, d) => {
          await assertKind(db, kind);
          const outcome = await cancelManyAudited(db, kind, placement.byStore.get(d.store)!, opts.actor ?? defaultActor());
          const states = await statesOf(db, kind, outcome.notLive);
          return { ...outcome, states, auditInCenter: outcome.cancelled.length === 0 || (await forwardAudit(a, d.store)) };
        });
        const cancelled = answers.flatMap((r) => (r.ok ? r.value.cancelled : []));
        const notLive = answers.flatMap((r) => (r.ok ? r.value.notLive : []));
        // Why each was not cancelled: the state its timeout is in now (none: never scheduled).
        const why = new Map(answers.flatMap((r) => (r.ok ? [...r.value.states] : [])));
        const unreachable = answers.flatMap((r) => (r.ok ? [] : [{ store: r.store, error: r.error, bizIds: placement.byStore.get(r.store)! }]));
        if (opts.json) {
          printJson({
            kind,
            cancelled,
            notLive,
            notLiveStates: Object.fromEntries(notLive.map((id) => [id, why.get(id) ?? 'none'])),
            ...(a.multi ? { unroutable: placement.unroutable, unreachable, stores: Object.fromEntries(placement.byStore) } : {}),
          });
        } else {
          const lines = [`cancelled ${cancelled.length} ${kind} timeout${cancelled.length === 1 ? '' : 's'}`];
          if (cancelled.length > 0) lines[0] += `: ${cancelled.join(', ')}`;
          for (const [state, reason] of Object.entries(REASONS)) {
            const ids = notLive.filter((id) => (why.get(id) ?? 'none') === state);
            if (ids.length > 0) lines.push(`not cancelled (${reason}): ${ids.join(', ')}`);
          }
          if (placement.unroutable.length > 0) {
            lines.push(
              `not cancelled (the store rule of ${kind} cannot place these ids: modulo and range take integer ids): ${placement.unroutable.join(', ')}`,
            );
          }
          for (const u of unreachable) {
            lines.push(`not cancelled (store ${u.store} UNREACHABLE: ${u.error}; run the same cancel again when it answers): ${u.bizIds.join(', ')}`);
          }
          if (answers.some((r) => r.ok && !r.value.auditInCenter)) {
            lines.push("(audited in the store; the center's database did not answer: the store's leader copies the records to its audit_log when it does)");
          }
          print(lines.join('\n'));
        }
        // Exit 0 only when every id was cancelled: an id already done, cancelled, held by a worker,
        // never scheduled, unroutable or in a store that did not answer makes it 1.
        if (cancelled.length < ids.length) partial();
      });
    });
}

/** What an operator is told about an id whose timeout was not cancelled, by the state it is in. */
const REASONS: Record<string, string> = {
  done: 'already done: its handler ran',
  cancelled: 'already cancelled',
  failed: 'it failed: see `timeout-center failed`',
  dispatched: 'too late: a worker holds it',
  pending: 'too late: a worker holds it',
  none: 'no timeout of this kind: never scheduled, or purged',
};

/** The state of each id's newest timeout of the kind (done ones included). */
async function statesOf(db: Kysely<Database>, kind: string, ids: string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const { rows } = await sql<{ biz_id: string; state: string }>`
    SELECT DISTINCT ON (biz_id) biz_id, state::text AS state FROM timeout_center.all_timeouts
     WHERE kind = ${kind} AND biz_id = ANY(${ids}::text[]) ORDER BY biz_id, id DESC`.execute(db);
  return new Map(rows.map((r) => [r.biz_id, r.state]));
}

/** Which database holds each id's timeout: the center for a center kind; for a kind stored
 *  beside, its rule evaluated by the first database that answers. */
async function place(a: Across, kind: string, ids: string[]): Promise<Placement> {
  const center: Placement = { byStore: new Map([[CENTER, ids]]), unroutable: [] };
  if (!a.config || !a.multi || a.directory.storesOfKind(kind)[0] === CENTER) return center;
  let lastError: unknown;
  for (const store of a.directory.names) {
    try {
      return (await placeBizIds(a.directory.database(store).pool, a.config.kinds, kind, ids)) ?? center;
    } catch (err) {
      lastError = err;
    }
  }
  throw new Error(`no database answers to place the ids of ${kind} (center and every store tried): ${(lastError as Error).message}`);
}
