// `migrate`'s roles step (src/db/roles.ts) in every database it migrated: the center, each store
// and each business database. It runs after the migrations, every time; a database that does not
// answer was already named by migrate's summary and is skipped here. A role that could not be
// created, or whose name is taken, is said on stderr with the SQL a DBA runs instead; the exit
// status stays migrate's (the schema is migrated either way).
import type { Logger } from 'pino';
import type { LoadedConfig } from '../config.js';
import { storeLayout } from '../stores/layout.js';
import { createClient } from './pool.js';
import { applyRoles, describeRolesProblems, type DatabaseRole, type RolesOutcome } from './roles.js';

async function inDatabase(name: string, url: string, where: DatabaseRole, logger: Logger): Promise<RolesOutcome | undefined> {
  const client = createClient(url, { connectionTimeoutMillis: 5000, application_name: 'timeout-center migrate (roles)' });
  client.on('error', () => {});
  try {
    await client.connect();
    const outcome = await applyRoles(client, where);
    logger.info({ database: name, created: outcome.created, granted: outcome.granted, rowSecurity: outcome.rowSecurity }, 'roles and grants applied');
    return outcome;
  } catch (err) {
    logger.warn({ database: name, err: (err as Error).message }, 'roles and grants not applied');
    process.stderr.write(`${name}: roles and grants not applied: ${(err as Error).message} (run migrate again)\n`);
    return undefined;
  } finally {
    await client.end().catch(() => {});
  }
}

/** The roles and grants in the center and, with a config, in its stores and business databases. */
export async function applyRolesEverywhere(centerUrl: string, config: LoadedConfig | undefined, logger: Logger): Promise<void> {
  const outcomes: [string, RolesOutcome | undefined][] = [['center', await inDatabase('center', centerUrl, 'center', logger)]];
  if (config) {
    const stores = new Set(storeLayout(config.kinds).keys());
    for (const [name, url] of Object.entries(config.businessDatabaseUrls)) {
      if (!url) continue;
      outcomes.push([name, await inDatabase(name, url, stores.has(name) ? 'store' : 'business database', logger)]);
    }
  }
  // A problem with a role is the same in every database of one server: said once per role.
  const said = new Set<string>();
  for (const [name, outcome] of outcomes) {
    if (!outcome) continue;
    const fresh = { ...outcome, problems: outcome.problems.filter((p) => !said.has(p.problem)) };
    for (const p of fresh.problems) said.add(p.problem);
    const lines = describeRolesProblems(name, fresh);
    if (lines.length > 0) process.stderr.write(`${lines.join('\n')}\n`);
  }
}
