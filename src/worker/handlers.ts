// Handlers: what a kind does with one shard's batch of business ids. A SQL handler without a
// database runs inside the shard's transaction (same database: the order change and the
// bookkeeping commit together). SQL handlers on business databases, code handlers and HTTP
// handlers run on the external path (external-executor.ts): claim committed first, then the
// handler, then the record.
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import pg from 'pg';
import type { HandlerConfig, KindConfig, LoadedConfig } from '../config.js';
import { layoutOf } from '../db/citus-layout.js';
import { isConnectionError } from '../db/pool.js';
import { InputError } from '../input-error.js';
import { arrayLiteral, AS_TEXT, literalOf, parseTextArray } from '../db/pg-text.js';
import { sqlHandlerForm, sqlParameterTypes, statementEnds, takesBucket, type BatchSqlHandler } from './sql-handler.js';
import { postShard } from './http-handler.js';
import type { ShardHandler } from './handler-contract.js';

/**
 * lock_timeout of a SQL handler's statement, well below PostgreSQL's deadlock_timeout (1 s by
 * default). A handler that waits on a row a payer holds gives up after this long (55P03) and the
 * whole shard transaction is retried (executor), releasing the shard's timeout rows: a payer that
 * cancels after touching the order (the unsafe order) then proceeds instead of deadlocking, and a
 * shard never waits a full deadlock_timeout on a payer. Payments hold rows for milliseconds.
 */
export const HANDLER_LOCK_TIMEOUT_MS = 100;

/** What a SQL handler's $2 is: nothing, the items' payloads, or (Citus) the shard's bucket. */
type SecondParameter = 'none' | 'payloads' | 'bucket';

/**
 * The statement with its returned ids aggregated where it runs: one row back, the ids as one array
 * literal, instead of one row per changed order. Runs as written instead: a statement that is
 * itself a WITH query (PostgreSQL allows a data-modifying WITH only at the top level), and one with
 * a `;` before its end (PostgreSQL refuses a second statement either way, and says so better).
 */
export function aggregatingReturned(sql: string): string | undefined {
  const ends = statementEnds(sql);
  const last = ends.at(-1);
  if (ends.length > 1) return undefined;
  // after its one `;`, nothing but comments and white space
  if (
    last !== undefined &&
    /\S/.test(
      sql
        .slice(last + 1)
        .replace(/--[^\n]*/g, '')
        .replace(/\/\*[\s\S]*?\*\//g, ''),
    )
  )
    return undefined;
  const body = last === undefined ? sql : sql.slice(0, last);
  if (/^(?:\s|--[^\n]*\n|\/\*[\s\S]*?\*\/)*with\b/i.test(body)) return undefined;
  return `WITH tc_returned AS (\n${body}\n) SELECT coalesce(array_agg(tc_r.tc_id::text), '{}')::text AS applied FROM tc_returned AS tc_r (tc_id)`;
}

function sqlHandler(sql: string, timeLimitMs: number, second: SecondParameter = /\$2\b/.test(sql) ? 'payloads' : 'none'): ShardHandler {
  const aggregated = aggregatingReturned(sql);
  return async (items, ctx) => {
    // the shard's biz_ids as one array literal (pg-text.ts): as the claim sent them when the
    // batch is the whole shard, else joined once
    const params: unknown[] = [literalOf(items) ?? arrayLiteral(items.map((i) => i.bizId))];
    if (second === 'payloads') params.push(items.map((i) => (i.payload === undefined ? null : JSON.stringify(i.payload))));
    if (second === 'bucket') {
      if (ctx.bucket === undefined) throw new Error(`the handler of ${ctx.kind} takes the bucket ($2), and shard ${ctx.shardId} has none`);
      params.push(ctx.bucket);
    }
    // The executor calls handlers inside a savepoint: on error, ROLLBACK TO SAVEPOINT also undoes
    // this SET LOCAL, so it is reset here only on success.
    await ctx.client.query(`SET LOCAL statement_timeout = ${Math.floor(timeLimitMs)}; SET LOCAL lock_timeout = ${HANDLER_LOCK_TIMEOUT_MS}`);
    if (aggregated) {
      const { rows } = await ctx.client.query<{ applied: string }>({ text: aggregated, values: params, types: AS_TEXT });
      await ctx.client.query('SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0');
      return parseTextArray(rows[0]!.applied);
    }
    const { rows } = await ctx.client.query<Record<string, unknown>>({ text: sql, values: params, rowMode: 'array' } as pg.QueryConfig);
    await ctx.client.query('SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0');
    return (rows as unknown as unknown[][]).map((r) => String(r[0]));
  };
}

function httpHandler(config: Extract<HandlerConfig, { type: 'http' }>, timeLimitMs: number): ShardHandler {
  return (items, ctx) => postShard(config, items, { kind: ctx.kind, shardId: ctx.shardId, attempt: ctx.attempt ?? 1, signal: ctx.signal, timeLimitMs });
}

async function codeHandler(
  kind: string,
  config: Extract<HandlerConfig, { type: 'code' }>,
  baseDir: string,
  registered: Map<string, ShardHandler>,
): Promise<ShardHandler> {
  const fn = registered.get(kind);
  if (fn) return fn;
  if (!config.module) {
    throw new InputError(`kinds."${kind}".handler: type code needs a module path, or register the handler in code with worker.registerHandler("${kind}", fn)`);
  }
  const url = pathToFileURL(resolve(baseDir, config.module)).href;
  let mod: Record<string, unknown>;
  try {
    mod = (await import(url)) as Record<string, unknown>;
  } catch (err) {
    throw new InputError(`kinds."${kind}".handler.module: cannot load ${config.module}: ${(err as Error).message}`, { cause: err });
  }
  const exported = mod[config.export];
  if (typeof exported !== 'function') {
    throw new InputError(`kinds."${kind}".handler: ${config.module} has no function export "${config.export}"`);
  }
  return exported as ShardHandler;
}

export interface ResolvedHandler {
  kind: string;
  config: KindConfig;
  run: ShardHandler;
  /** SQL handlers that take only $1: claim and handler as one statement (sql-handler.ts). */
  batch?: BatchSqlHandler;
  /** Which form the handler runs in and why (logged at start): batch (inside the claim
   *  statement), plain (a statement of its own after the claim), or external (claim committed
   *  first, then the handler in a business database, over HTTP or in code; external-executor.ts). */
  form: { form: 'batch' | 'plain' | 'external'; reason: string };
  /** Set when the kind runs on the external path (worker/external-executor.ts). */
  external?: ExternalTarget;
}

/** Where an external kind's handler runs. */
export type ExternalTarget =
  /** A SQL handler in business databases: `database` fixed, or chosen per shard (its target). */
  | { via: 'sql'; database: string | undefined; routed: boolean; /** the statement reads $2 */ payloads: boolean }
  /** A code handler, in a transaction on a business database or the center's own. */
  | { via: 'code'; database: string | undefined }
  | { via: 'http' };

/** The external target of a kind's handler, or undefined for the same-database path. */
export function externalTarget(handler: HandlerConfig): ExternalTarget | undefined {
  if (handler.type === 'http') return { via: 'http' };
  if (handler.type === 'code') return { via: 'code', database: handler.database };
  const payloads = /\$2\b/.test(handler.sql);
  if (handler.database) return { via: 'sql', database: handler.database, routed: false, payloads };
  if (handler.route) return { via: 'sql', database: undefined, routed: true, payloads };
  return undefined;
}

/** Builds every kind's handler; SQL statements are checked by PostgreSQL (PREPARE) so a typo
 *  fails at start with the kind's name, not at the first due timeout. */
export async function resolveHandlers(
  config: LoadedConfig,
  kinds: string[],
  registered: Map<string, ShardHandler>,
  pool: pg.Pool,
): Promise<Map<string, ResolvedHandler>> {
  const out = new Map<string, ResolvedHandler>();
  for (const kind of kinds) {
    const kc = config.kinds[kind]!;
    let run: ShardHandler;
    let batch: BatchSqlHandler | undefined;
    let form: ResolvedHandler['form'];
    const external = externalTarget(kc.handler);
    if (kc.handler.type === 'sql' && external) {
      // Its tables live in the business databases, which may be down right now: PostgreSQL
      // checks the statement there at its first shard.
      run = sqlHandler(kc.handler.sql, kc.timeLimitMs);
      form = {
        form: 'external',
        reason: kc.handler.database
          ? `in business database ${kc.handler.database}`
          : `in the business database its route picks per shard (${kc.handler.route?.by})`,
      };
    } else if (kc.handler.type === 'sql') {
      const parameterTypes = await checkSql(pool, kind, kc.handler.sql);
      run = sqlHandler(kc.handler.sql, kc.timeLimitMs, takesBucket(await layoutOf(pool), parameterTypes) ? 'bucket' : undefined);
      const sqlForm = await sqlHandlerForm(pool, kc.handler.sql, kc.timeLimitMs, parameterTypes);
      if (sqlForm.form === 'batch') batch = sqlForm.batch;
      form = { form: sqlForm.form, reason: sqlForm.reason };
    } else if (kc.handler.type === 'http') {
      run = httpHandler(kc.handler, kc.timeLimitMs);
      form = { form: 'external', reason: 'one POST per shard, after a claim that commits first' };
    } else {
      run = await codeHandler(kind, kc.handler, config.baseDir, registered);
      form = {
        form: 'external',
        reason: `a code function${kc.handler.type === 'code' && kc.handler.database ? ` in business database ${kc.handler.database}` : ''}, after a claim that commits first`,
      };
    }
    out.set(kind, { kind, config: kc, run, form, ...(batch ? { batch } : {}), ...(external ? { external } : {}) });
  }
  return out;
}

/** PostgreSQL's check of a SQL handler at start (a typo fails here, with the kind's name); returns
 *  the parameter types it inferred, which the batch form needs. A statement PostgreSQL rejects is
 *  bad input (the config's to fix); a server that stops answering is not, and goes up as it is. */
async function checkSql(pool: pg.Pool, kind: string, sql: string): Promise<string[]> {
  try {
    return await sqlParameterTypes(pool, sql);
  } catch (err) {
    if (!(err instanceof pg.DatabaseError) || isConnectionError(err)) throw err;
    throw new InputError(
      `kinds."${kind}".handler.sql: PostgreSQL rejects the statement: ${(err as Error).message}; fix the statement in the config, or create what it names in the database the kind's timeouts are in, then start again`,
      { cause: err },
    );
  }
}
