// A Citus cluster of its own for a test file (docs/scale.md "Citus: what runs"): a coordinator and
// N worker nodes, each a PostgreSQL on a free port (servers.ts: initdb + pg_ctl as the postgres
// user, fsync off) with shared_preload_libraries = 'citus'. Citus keeps its metadata per database,
// so createDatabase() creates the database on every node, the extension in each, and registers the
// nodes with citus_set_coordinator_host / citus_add_node there. stop() (or stopAllServers()) stops
// every node. Needs Citus installed: requireTools('citus') (system-tools.ts).
import pg from 'pg';
import { startPostgres, type PostgresServer } from './servers.ts';

const CITUS_SETTINGS = {
  shared_preload_libraries: 'citus',
  // the coordinator opens connections to every worker per shard it touches at once
  max_connections: '300',
  // one machine: no need for Citus's background checks on a new version
  'citus.enable_statistics_collection': 'off',
  // logical replication for shard moves (citus_rebalance_start)
  wal_level: 'logical',
  max_worker_processes: '32',
} as const;

export interface CitusCluster {
  readonly coordinator: PostgresServer;
  /** The worker nodes, in the order they were added. */
  readonly workers: PostgresServer[];
  /** Creates `name` on every node with the citus extension and registers the nodes there; returns
   *  the coordinator's URL for it. */
  createDatabase(name: string): Promise<string>;
  /** Starts one more worker node and registers it in every database created so far
   *  (citus_add_node; no shard moves until citus_rebalance_start). */
  addWorker(): Promise<PostgresServer>;
  /** Runs SQL on a node's database (a short-lived connection). */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(server: PostgresServer, database: string, text: string, values?: unknown[]): Promise<R[]>;
  stop(): Promise<void>;
}

async function queryOn<R extends pg.QueryResultRow>(url: string, text: string, values?: unknown[]): Promise<R[]> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  try {
    return (await c.query<R>(text, values)).rows;
  } finally {
    await c.end().catch(() => {});
  }
}

async function prepareNode(server: PostgresServer, name: string): Promise<void> {
  await queryOn(server.url(), `CREATE DATABASE ${name}`);
  await queryOn(server.url(name), 'CREATE EXTENSION citus');
}

export async function startCitusCluster(workerCount = 2, extraSettings: Readonly<Record<string, string>> = {}): Promise<CitusCluster> {
  const settings = { ...CITUS_SETTINGS, ...extraSettings };
  const nodes = await Promise.all(Array.from({ length: workerCount + 1 }, () => startPostgres({ settings })));
  const coordinator = nodes[0]!;
  const workers = nodes.slice(1);
  const databases: string[] = [];
  const cluster: CitusCluster = {
    coordinator,
    workers,
    async createDatabase(name) {
      if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`database name ${name}: lower case, digits, _`);
      for (const n of [coordinator, ...workers]) await prepareNode(n, name);
      await queryOn(coordinator.url(name), 'SELECT citus_set_coordinator_host($1, $2)', ['127.0.0.1', coordinator.port]);
      for (const w of workers) await queryOn(coordinator.url(name), 'SELECT citus_add_node($1, $2)', ['127.0.0.1', w.port]);
      databases.push(name);
      return coordinator.url(name);
    },
    async addWorker() {
      const w = await startPostgres({ settings });
      for (const name of databases) {
        await prepareNode(w, name);
        await queryOn(coordinator.url(name), 'SELECT citus_add_node($1, $2)', ['127.0.0.1', w.port]);
      }
      workers.push(w);
      return w;
    },
    query: (server, database, text, values) => queryOn(server.url(database), text, values),
    async stop() {
      await Promise.all([coordinator, ...workers].map((n) => n.stop()));
    },
  };
  return cluster;
}
