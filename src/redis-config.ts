// The Redis part of the configuration (docs/operations.md "Redis Cluster and Sentinel"): one node
// (redisUrl / REDIS_URL), a Redis Cluster, or Sentinel, from the file's `redis` section and the
// REDIS_* environment variables, validated with the same error style as the rest (config.ts).
import { z } from 'zod';

/** A Redis node as "host:port" (IPv6 in brackets) or { host, port }. */
const redisNode = z.union([z.string(), z.strictObject({ host: z.string().min(1), port: z.number().int() })]).transform((node, ctx) => {
  let out = typeof node === 'string' ? undefined : node;
  if (typeof node === 'string') {
    const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:,[\]{}]+)):(\d{1,5})$/.exec(node.trim());
    if (m) out = { host: (m[1] ?? m[2])!, port: Number(m[3]) };
    else ctx.addIssue({ code: 'custom', message: `"${node}": a node is host:port, e.g. 10.0.0.1:6379` });
  }
  if (out && (out.port < 1 || out.port > 65535)) ctx.addIssue({ code: 'custom', message: `port must be 1-65535, got ${out.port}` });
  return out ?? { host: '', port: 0 };
});

/** Redis Cluster or Sentinel (docs/operations.md "Redis Cluster and Sentinel"). One node is
 *  redisUrl / REDIS_URL, as before; its credentials and TLS go in the URL (rediss://user:pw@host). */
export const redisSchema = z
  .strictObject({
    /** Redis Cluster: a few of its nodes (seeds); the client learns the rest. REDIS_CLUSTER wins. */
    cluster: z.array(redisNode).min(1).max(100).optional(),
    /** Sentinel: the sentinels. REDIS_SENTINELS wins. */
    sentinels: z.array(redisNode).min(1).max(100).optional(),
    /** Sentinel: the primary's name (`sentinel monitor <name> ...`). REDIS_SENTINEL_NAME wins. */
    sentinelName: z.string().min(1).optional(),
    /** ACL user and password of the data nodes. REDIS_USERNAME / REDIS_PASSWORD win (keep
     *  passwords out of the file). */
    username: z.string().min(1).optional(),
    password: z.string().min(1).optional(),
    /** The sentinels' own credentials, when they require them. REDIS_SENTINEL_PASSWORD wins. */
    sentinelUsername: z.string().min(1).optional(),
    sentinelPassword: z.string().min(1).optional(),
    /** TLS to the data nodes (and to the sentinels). Default false. REDIS_TLS=true wins. */
    tls: z.boolean().default(false),
  })
  .superRefine((r, ctx) => {
    if (r.cluster && r.sentinels) ctx.addIssue({ code: 'custom', message: 'give cluster or sentinels, not both' });
    if (r.sentinels && !r.sentinelName)
      ctx.addIssue({ code: 'custom', path: ['sentinelName'], message: 'name the primary the sentinels monitor (sentinel monitor <name> ...)' });
    if (r.sentinelName && !r.sentinels) ctx.addIssue({ code: 'custom', path: ['sentinels'], message: 'sentinelName needs the sentinels (host:port list)' });
    if (!r.cluster && !r.sentinels && (r.username || r.password || r.tls)) {
      ctx.addIssue({
        code: 'custom',
        message: 'credentials and tls here are for cluster or sentinels; for one node put them in redisUrl (rediss://user:password@host:port)',
      });
    }
  });

/** The file's `redis` section as validated. */
export type RedisSection = z.output<typeof redisSchema>;

export interface RedisNode {
  host: string;
  port: number;
}

/** Which Redis the channel and the leadership lock use, resolved from the file and the
 *  environment (src/transport/redis-connection.ts builds the clients). */
export type RedisConnectionConfig =
  | { mode: 'single'; url: string }
  | { mode: 'cluster'; nodes: RedisNode[]; username?: string | undefined; password?: string | undefined; tls: boolean }
  | {
      mode: 'sentinel';
      sentinels: RedisNode[];
      name: string;
      username?: string | undefined;
      password?: string | undefined;
      sentinelUsername?: string | undefined;
      sentinelPassword?: string | undefined;
      tls: boolean;
    };

/** Environment variables of the Redis connection, and the field each one sets. */
const REDIS_ENV = {
  REDIS_CLUSTER: 'cluster',
  REDIS_SENTINELS: 'sentinels',
  REDIS_SENTINEL_NAME: 'sentinelName',
  REDIS_USERNAME: 'username',
  REDIS_PASSWORD: 'password',
  REDIS_SENTINEL_USERNAME: 'sentinelUsername',
  REDIS_SENTINEL_PASSWORD: 'sentinelPassword',
  REDIS_TLS: 'tls',
} as const;

/** The Redis connection: one form of REDIS_URL, REDIS_CLUSTER, REDIS_SENTINELS wins over the
 *  file's redisUrl / redis section; the other REDIS_* variables win over the file's fields. Returns
 *  the problems (each naming the variable or field) when it cannot. */
export function resolveRedis(
  config: { redisUrl?: string | undefined; redis?: RedisSection | undefined },
  env: NodeJS.ProcessEnv,
): RedisConnectionConfig | string[] {
  const forms = (['REDIS_URL', 'REDIS_CLUSTER', 'REDIS_SENTINELS'] as const).filter((v) => env[v]);
  if (forms.length > 1) return [`${forms.join(', ')}: set only one of REDIS_URL (one node), REDIS_CLUSTER (cluster seed nodes) or REDIS_SENTINELS`];
  const fromEnv = forms[0];
  if (fromEnv === 'REDIS_URL') return { mode: 'single', url: env['REDIS_URL']! };
  const section: Record<string, unknown> = fromEnv ? {} : { ...config.redis };
  const label: Record<string, string> = {};
  for (const [name, field] of Object.entries(REDIS_ENV)) {
    const value = env[name];
    if (!value) continue;
    label[field] = name;
    section[field] =
      field === 'cluster' || field === 'sentinels' ? value.split(',').map((n) => n.trim()) : field === 'tls' ? /^(1|true|yes)$/i.test(value) : value;
  }
  if (!fromEnv && !config.redis?.cluster && !config.redis?.sentinels) {
    if (config.redisUrl) return { mode: 'single', url: config.redisUrl };
    return [
      'redisUrl: not set: set REDIS_URL (e.g. redis://127.0.0.1:6379), REDIS_CLUSTER (host:port,host:port) or REDIS_SENTINELS with REDIS_SENTINEL_NAME, or redisUrl / redis.cluster / redis.sentinels in the file',
    ];
  }
  const parsed = redisSchema.safeParse(section);
  if (!parsed.success) {
    return parsed.error.issues.map((issue) => {
      const field = String(issue.path[0] ?? '');
      const where = label[field] ?? (field ? `redis.${issue.path.join('.')}` : 'redis');
      return `${where}: ${issue.message}`;
    });
  }
  const r = parsed.data;
  const auth = { username: r.username, password: r.password, tls: r.tls };
  if (r.cluster) return { mode: 'cluster', nodes: r.cluster, ...auth };
  return {
    mode: 'sentinel',
    sentinels: r.sentinels!,
    name: r.sentinelName!,
    sentinelUsername: r.sentinelUsername,
    sentinelPassword: r.sentinelPassword,
    ...auth,
  };
}
