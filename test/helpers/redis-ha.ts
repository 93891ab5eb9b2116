// Private Redis Cluster (3 masters + 3 replicas) and Sentinel (primary + replica + 3 sentinels)
// for failover tests, on free ports in temp directories. Like servers.ts: every process started
// here is tracked and stopAllServers() (call it from afterAll) stops what is still running.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, registerStop } from './servers.ts';

const run = promisify(execFile);

export async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-p', String(port), ...args], { timeout: 30_000 });
  return stdout.trim();
}

async function waitUntil(what: string, test: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await test().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} not ready within ${timeoutMs} ms`);
}

/** One redis-server process that can be SIGKILLed and started again on its port. */
export class RedisProcess {
  private child: ChildProcess | undefined;
  constructor(
    readonly port: number,
    private readonly args: () => string[],
  ) {}

  get alive(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  async start(): Promise<void> {
    const child = spawn('redis-server', this.args(), { stdio: 'ignore' });
    child.once('error', () => {});
    this.child = child;
    await waitUntil(`redis-server on port ${this.port}`, async () => (await cli(this.port, 'PING')) === 'PONG', 10_000);
  }

  async kill(): Promise<void> {
    const c = this.child;
    this.child = undefined;
    if (c && c.exitCode === null && c.signalCode === null) {
      c.kill('SIGKILL');
      await once(c, 'exit');
    }
  }
}

const NO_PERSISTENCE = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'];

export interface RedisCluster {
  nodes: RedisProcess[];
  /** REDIS_CLUSTER's value: every node as host:port. */
  seeds: string;
  /** The port of the master serving this key's slot, asked of any live node. */
  masterOf(key: string): Promise<number>;
  /** slot -> master port for these keys. */
  slotOwners(keys: string[]): Promise<{ key: string; slot: number; master: number }[]>;
  /** Kills every node, deletes their cluster state and creates the cluster again, empty. */
  restartEmpty(): Promise<void>;
  killAll(): Promise<void>;
  stop(): Promise<void>;
}

/** `redis-server --cluster-enabled yes` per node, then `redis-cli --cluster create ... --cluster-replicas 1`.
 *  cluster-node-timeout 1000 ms so a dead master is failed over within about 2 s;
 *  cluster-require-full-coverage no so the other masters' slots keep working meanwhile. */
export async function startRedisCluster(options: { masters?: number; replicas?: 0 | 1; nodeTimeoutMs?: number } = {}): Promise<RedisCluster> {
  const masters = options.masters ?? 3;
  const replicas = options.replicas ?? 1;
  const dir = mkdtempSync(join(tmpdir(), 'tc-redis-cluster-'));
  const ports: number[] = [];
  for (let i = 0; i < masters * (1 + replicas); i += 1) ports.push(await freePort());
  let generation = 0;
  const nodes = ports.map(
    (port) =>
      new RedisProcess(port, () => [
        '--port',
        String(port),
        ...NO_PERSISTENCE,
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        `nodes-${port}-${generation}.conf`,
        '--cluster-node-timeout',
        String(options.nodeTimeoutMs ?? 1000),
        '--cluster-require-full-coverage',
        'no',
        '--cluster-replica-validity-factor',
        '0',
        '--dir',
        dir,
      ]),
  );
  const create = async () => {
    await Promise.all(nodes.map((n) => n.start()));
    // Clients of the old cluster reconnect within milliseconds and may already have reached a
    // node: make each one empty and alone before the create.
    for (const p of ports) await cli(p, 'FLUSHALL').then(() => cli(p, 'CLUSTER', 'RESET', 'HARD'));
    await run('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', String(replicas), '--cluster-yes'], {
      timeout: 60_000,
    }).catch((err: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`redis-cli --cluster create failed: ${err.message}\n${err.stdout ?? ''}\n${err.stderr ?? ''}`);
    });
    await waitUntil(
      'cluster_state:ok with every replica attached',
      async () => {
        for (const p of ports) if (!(await cli(p, 'CLUSTER', 'INFO')).includes('cluster_state:ok')) return false;
        const lines = (await cli(ports[0]!, 'CLUSTER', 'NODES')).split('\n');
        return (
          lines.filter((l) => l.includes('slave')).length === masters * replicas &&
          lines.filter((l) => l.includes('master') && !l.includes('fail')).length === masters
        );
      },
      30_000,
    );
  };
  const anyLive = () => nodes.find((n) => n.alive)!.port;
  const slotOwners = async (keys: string[]) => {
    const nodesOut = (await cli(anyLive(), 'CLUSTER', 'NODES')).split('\n').map((l) => l.split(' '));
    const owners: { from: number; to: number; port: number }[] = [];
    for (const f of nodesOut) {
      if (!f[2]?.includes('master') || f[2].includes('fail')) continue;
      const port = Number(/:(\d+)@/.exec(f[1] ?? '')?.[1]);
      for (const range of f.slice(8)) {
        const [a, b] = range.split('-').map(Number);
        if (Number.isInteger(a)) owners.push({ from: a!, to: b ?? a!, port });
      }
    }
    const out: { key: string; slot: number; master: number }[] = [];
    for (const key of keys) {
      const slot = Number(await cli(anyLive(), 'CLUSTER', 'KEYSLOT', key));
      out.push({ key, slot, master: owners.find((o) => slot >= o.from && slot <= o.to)?.port ?? -1 });
    }
    return out;
  };
  const killAll = async () => {
    await Promise.all(nodes.map((n) => n.kill()));
  };
  const cluster: RedisCluster = {
    nodes,
    seeds: ports.map((p) => `127.0.0.1:${p}`).join(','),
    slotOwners,
    async masterOf(key) {
      return (await slotOwners([key]))[0]!.master;
    },
    async restartEmpty() {
      await killAll();
      generation += 1; // a fresh cluster-config-file: the nodes forget the old cluster
      await create();
    },
    killAll,
    async stop() {
      await killAll();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  registerStop(cluster.stop);
  await create();
  return cluster;
}

export interface SentinelGroup {
  name: string;
  primary: RedisProcess;
  replica: RedisProcess;
  sentinels: RedisProcess[];
  /** REDIS_SENTINELS's value. */
  seeds: string;
  /** The primary's port as the sentinels report it now. */
  primaryPort(): Promise<number>;
  stop(): Promise<void>;
}

/** A primary, one replica and three sentinels (quorum 2, down-after 1000 ms). */
export async function startSentinelGroup(name = 'tcprimary'): Promise<SentinelGroup> {
  const dir = mkdtempSync(join(tmpdir(), 'tc-redis-sentinel-'));
  const primaryPort = await freePort();
  const replicaPort = await freePort();
  const primary = new RedisProcess(primaryPort, () => ['--port', String(primaryPort), ...NO_PERSISTENCE, '--dir', dir]);
  const replica = new RedisProcess(replicaPort, () => [
    '--port',
    String(replicaPort),
    ...NO_PERSISTENCE,
    '--dir',
    dir,
    '--replicaof',
    '127.0.0.1',
    String(primaryPort),
  ]);
  await primary.start();
  await replica.start();
  const sentinels: RedisProcess[] = [];
  for (let i = 0; i < 3; i += 1) {
    const port = await freePort();
    const conf = join(dir, `sentinel-${port}.conf`);
    writeFileSync(
      conf,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor ${name} 127.0.0.1 ${primaryPort} 2`,
        `sentinel down-after-milliseconds ${name} 1000`,
        `sentinel failover-timeout ${name} 5000`,
        `sentinel parallel-syncs ${name} 1`,
        '',
      ].join('\n'),
    );
    const s = new RedisProcess(port, () => [conf, '--sentinel']);
    await s.start();
    sentinels.push(s);
  }
  const group: SentinelGroup = {
    name,
    primary,
    replica,
    sentinels,
    seeds: sentinels.map((s) => `127.0.0.1:${s.port}`).join(','),
    async primaryPort() {
      const live = sentinels.find((s) => s.alive)!;
      const out = (await cli(live.port, 'SENTINEL', 'get-master-addr-by-name', name)).split('\n');
      return Number(out[1]);
    },
    async stop() {
      await Promise.all([...sentinels, primary, replica].map((p) => p.kill()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  registerStop(group.stop);
  // The sentinels must know the replica (and each other) before a failover can happen.
  await waitUntil(
    'sentinels see the replica and each other',
    async () => {
      for (const s of sentinels) {
        const info = await cli(s.port, 'SENTINEL', 'master', name);
        const field = (k: string) => Number(info.split('\n')[info.split('\n').indexOf(k) + 1]);
        if (field('num-slaves') < 1 || field('num-other-sentinels') < 2) return false;
      }
      return true;
    },
    30_000,
  );
  return group;
}
