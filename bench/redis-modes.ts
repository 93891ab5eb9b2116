// npm run bench:redis [-- --n 200000 --rounds 3 --out file.json]: the same burst through one Redis
// and through a local Redis Cluster of 3 masters, interleaved rounds (single, cluster, cluster,
// single, ...), each on a fresh database of the bench's PostgreSQL; end times read at commit like
// every burst (bench/lib/workloads.ts). Prints each round and the ratio of the median rates, and
// writes the same figures to --out (docs/bench/redis-cluster.json is the one docs/benchmarks.md cites).
import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { startBenchServer } from './lib/server.ts';
import { Status } from './lib/status.ts';
import { VARIANTS } from './lib/variants.ts';
import { burst } from './lib/workloads.ts';
import { killAll } from '../test/helpers/processes.ts';
import { startRedisCluster } from '../test/helpers/redis-ha.ts';
import { stopAllServers } from '../test/helpers/servers.ts';

const { values: args } = parseArgs({ options: { n: { type: 'string' }, rounds: { type: 'string' }, out: { type: 'string' } }, strict: true });
const n = Number((args.n ?? '200000').replace(/_/g, ''));
const rounds = Number(args.rounds ?? '3');
const variant = VARIANTS.find((v) => v.id === 'tc-default')!;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const status = new Status();
const server = await startBenchServer();
const cluster = await startRedisCluster({ masters: 3, replicas: 0 });
const rates: Record<'single' | 'cluster', number[]> = { single: [], cluster: [] };
try {
  for (let r = 0; r < rounds; r += 1) {
    const order: ('single' | 'cluster')[] = r % 2 === 0 ? ['single', 'cluster'] : ['cluster', 'single'];
    for (const mode of order) {
      const env = { status, server, ...(mode === 'cluster' ? { redisEnv: { REDIS_CLUSTER: cluster.seeds } } : {}) };
      const b = await burst(variant, n, 300, env);
      if (b.timedOut || !b.correctness.ok) throw new Error(`${mode} round ${r + 1} failed: ${JSON.stringify(b.correctness)}`);
      rates[mode].push(b.rate);
      status.log(`round ${r + 1} ${mode}: ${n.toLocaleString('en')} in ${b.seconds.toFixed(2)} s = ${Math.round(b.rate).toLocaleString('en')}/s`);
    }
  }
  const single = median(rates.single);
  const clustered = median(rates.cluster);
  const figures = {
    at: new Date().toISOString(),
    n,
    rounds,
    singleRates: rates.single.map(Math.round),
    clusterRates: rates.cluster.map(Math.round),
    singleMedian: Math.round(single),
    clusterMedian: Math.round(clustered),
    ratio: Number((clustered / single).toFixed(3)),
    loadAverageAtEnd: loadavg().map((x) => Number(x.toFixed(1))),
  };
  console.log(JSON.stringify(figures));
  if (args.out) writeFileSync(args.out, `${JSON.stringify(figures, null, 2)}\n`);
} finally {
  await killAll();
  await stopAllServers();
  await server.stop();
}
