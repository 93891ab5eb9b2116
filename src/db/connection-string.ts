// PostgreSQL connection strings the way libpq reads them, including the multi-host lists HA setups
// hand out (pg_auto_failover, Patroni, cloud services), which node-postgres does not read (its
// issues #1470, #2781): `postgres://h1:5432,h2:5432/db?target_session_attrs=read-write` and
// `host=h1,h2 port=5432,5433 dbname=db target_session_attrs=primary`. parseConnectionString turns
// either form into an ordered list of hosts, the session each must offer, and, per host, a
// single-host URL that pg itself reads (so sslmode, options, application_name... keep pg's meaning).
// multi-host-client.ts connects through it.

export type TargetSessionAttrs = 'any' | 'read-write' | 'primary';

export interface HostPort {
  /** A name or address (IPv6 without brackets), or a Unix-domain socket directory. */
  host: string;
  port: number;
}

export interface ParsedConnection {
  hosts: HostPort[];
  targetSessionAttrs: TargetSessionAttrs;
  /** connect_timeout in ms, per host tried (libpq: seconds, values 1 treated as 2, 0 = none). */
  connectTimeoutMs: number | undefined;
  /** One URL per host, in order, each naming that host only and carrying the other parameters. */
  perHost: string[];
  /** The string needs nothing pg does not do already (a URL with one host and no
   *  target_session_attrs or connect_timeout, or neither libpq form): pg reads it unchanged.
   *  hosts and perHost are empty for a string in neither form. */
  plain: boolean;
  /** For logs, status and /readyz: hosts, ports and database, never the password. */
  display: string;
}

export class ConnectionStringError extends Error {
  override name = 'ConnectionStringError';
}

/** libpq's target_session_attrs values we refuse, and why: every connection of the engine writes. */
const REFUSED_TSA: Record<string, string> = {
  'read-only': 'the engine writes on every connection, so it needs read-write or primary',
  standby: 'the engine writes on every connection, so it needs read-write or primary',
  'prefer-standby': 'the engine writes on every connection, so it needs read-write or primary',
};
const ACCEPTED_TSA: readonly TargetSessionAttrs[] = ['any', 'read-write', 'primary'];

/** libpq keywords we cannot honour; each is refused by name rather than silently ignored. */
const REFUSED_KEYS: Record<string, string> = {
  hostaddr: 'give the addresses in host (a list: host=10.0.0.1,10.0.0.2)',
  service: 'pg_service.conf is not read; give host, port and dbname',
  servicefile: 'pg_service.conf is not read; give host, port and dbname',
  passfile: '.pgpass files are not read; give the password in the string or PGPASSWORD',
  load_balance_hosts: 'hosts are always tried in the order given (load_balance_hosts=disable)',
  requirepeer: 'not supported',
  gssencmode: 'not supported',
  krbsrvname: 'not supported',
  gsslib: 'not supported',
  replication: 'not supported',
};

/** Keywords that select hosts or the session; the rest go to pg with each host's URL. */
const SELECTION_KEYS = new Set(['host', 'port', 'target_session_attrs', 'connect_timeout']);

function fail(message: string): never {
  throw new ConnectionStringError(`connection string: ${message}`);
}

/** libpq's URI: postgres[ql]://[user[:password]@][host[:port][,...]][/dbname][?param=value&...]. */
function parseUri(s: string): Map<string, string> {
  const m = /^postgres(?:ql)?:\/\/([^/?#]*)(\/[^?#]*)?(\?[^#]*)?$/i.exec(s);
  if (!m) fail('not a postgres:// URL (a fragment #... or a malformed URL?)');
  const params = new Map<string, string>();
  let authority = m[1] ?? '';
  const at = authority.lastIndexOf('@');
  if (at >= 0) {
    const userinfo = authority.slice(0, at);
    authority = authority.slice(at + 1);
    const colon = userinfo.indexOf(':');
    const user = decode(colon >= 0 ? userinfo.slice(0, colon) : userinfo, 'user');
    if (user) params.set('user', user);
    if (colon >= 0) params.set('password', decode(userinfo.slice(colon + 1), 'password'));
  }
  if (authority) {
    const hosts: string[] = [];
    const ports: string[] = [];
    for (const spec of authority.split(',')) {
      const v6 = /^\[([^\]]+)\](?::(\d*))?$/.exec(spec);
      if (v6) {
        hosts.push(v6[1]!);
        ports.push(v6[2] ?? '');
        continue;
      }
      if (spec.includes('[') || spec.includes(']') || (spec.match(/:/g)?.length ?? 0) > 1) fail(`host "${spec}": an IPv6 address goes in brackets, [::1]:5432`);
      const colon = spec.lastIndexOf(':');
      hosts.push(decode(colon >= 0 ? spec.slice(0, colon) : spec, 'host'));
      ports.push(colon >= 0 ? spec.slice(colon + 1) : '');
    }
    params.set('host', hosts.join(','));
    if (ports.some((p) => p !== '')) params.set('port', ports.join(','));
  }
  const path = m[2]?.slice(1);
  if (path) params.set('dbname', decode(path, 'dbname'));
  for (const pair of (m[3] ?? '').slice(1).split('&')) {
    if (!pair) continue;
    const eq = pair.indexOf('=');
    if (eq < 0) fail(`URL parameter "${pair}" has no value (write ${pair}=...)`);
    // A parameter overrides the same thing in the URL's body, as in libpq.
    params.set(decode(pair.slice(0, eq), 'parameter'), decode(pair.slice(eq + 1), 'parameter'));
  }
  return params;
}

function decode(s: string, what: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return fail(`${what} is not valid percent-encoding`);
  }
}

/** libpq's key-value form: key = value pairs separated by spaces; a value with spaces is
 *  single-quoted, with \' and \\ inside. */
function parseKeyValue(s: string): Map<string, string> {
  const params = new Map<string, string>();
  let i = 0;
  const skipSpace = (): void => {
    while (i < s.length && /\s/.test(s[i]!)) i++;
  };
  for (;;) {
    skipSpace();
    if (i >= s.length) return params;
    const keyStart = i;
    while (i < s.length && /[A-Za-z0-9_]/.test(s[i]!)) i++;
    const key = s.slice(keyStart, i);
    skipSpace();
    if (!key || s[i] !== '=') fail(`expected key=value at "${s.slice(keyStart, keyStart + 20)}"`);
    i++;
    skipSpace();
    let value = '';
    if (s[i] === "'") {
      i++;
      for (;;) {
        if (i >= s.length) fail(`unterminated quoted value for ${key}`);
        const c = s[i]!;
        if (c === '\\' && i + 1 < s.length) {
          value += s[i + 1];
          i += 2;
        } else if (c === "'") {
          i++;
          break;
        } else {
          value += c;
          i++;
        }
      }
    } else {
      while (i < s.length && !/\s/.test(s[i]!)) {
        if (s[i] === '\\' && i + 1 < s.length) i++;
        value += s[i];
        i++;
      }
    }
    params.set(key, value);
  }
}

function parsePort(p: string, host: string): number {
  if (!/^\d{1,5}$/.test(p) || Number(p) < 1 || Number(p) > 65535) fail(`port "${p}" of host "${host}" is not a port number`);
  return Number(p);
}

/** Parses a URL or key-value connection string; throws ConnectionStringError naming what it refuses. */
export function parseConnectionString(s: string): ParsedConnection {
  const trimmed = s.trim();
  const isUri = /^postgres(?:ql)?:\/\//i.test(trimmed);
  if (!isUri && !/^\s*[A-Za-z_][A-Za-z0-9_]*\s*=/.test(trimmed)) {
    // Neither libpq form (pg's own socket forms, "/var/run/postgresql db" or socket:...): pg
    // reads it as it always did.
    return { hosts: [], targetSessionAttrs: 'any', connectTimeoutMs: undefined, perHost: [], plain: true, display: '(a connection string pg reads as is)' };
  }
  const params = isUri ? parseUri(trimmed) : parseKeyValue(trimmed);
  for (const [key, why] of Object.entries(REFUSED_KEYS)) {
    if (!params.has(key)) continue;
    if (key === 'load_balance_hosts' && params.get(key) === 'disable') continue;
    fail(`${key} is not supported: ${why}`);
  }

  const tsaRaw = params.get('target_session_attrs') ?? 'any';
  if (REFUSED_TSA[tsaRaw]) fail(`target_session_attrs=${tsaRaw} is not supported: ${REFUSED_TSA[tsaRaw]}`);
  if (!(ACCEPTED_TSA as readonly string[]).includes(tsaRaw)) {
    fail(`target_session_attrs=${tsaRaw} is not a libpq value; accepted: ${ACCEPTED_TSA.join(', ')}`);
  }
  const targetSessionAttrs = tsaRaw as TargetSessionAttrs;

  let connectTimeoutMs: number | undefined;
  const ct = params.get('connect_timeout');
  if (ct !== undefined) {
    if (!/^\d+$/.test(ct)) fail(`connect_timeout=${ct} is not a whole number of seconds`);
    const sec = Number(ct);
    connectTimeoutMs = sec === 0 ? undefined : Math.max(sec, 2) * 1000;
  }

  const hostList = (params.get('host') ?? '').split(',');
  const portList = (params.get('port') ?? '').split(',');
  if (portList.length !== 1 && portList.length !== hostList.length) {
    fail(`${hostList.length} hosts but ${portList.length} ports: give one port for all, or one per host`);
  }
  const hosts: HostPort[] = hostList.map((h, i) => {
    const host = h.trim() || 'localhost';
    const p = (portList.length === 1 ? portList[0]! : portList[i]!).trim();
    return { host, port: p ? parsePort(p, host) : 5432 };
  });
  if (hosts.length > 1 && hosts.some((h) => h.host.startsWith('/'))) {
    fail('a Unix-domain socket directory cannot be part of a host list; give TCP hosts');
  }

  const rest = [...params].filter(([k]) => !SELECTION_KEYS.has(k));
  const perHost = hosts.map((h) => hostUrl(h, rest));
  const db = params.get('dbname') ?? params.get('user') ?? '';
  const display = `${hosts.map(hostLabel).join(',')}/${db}${targetSessionAttrs === 'any' ? '' : ` (${targetSessionAttrs})`}`;
  const plain = isUri && hosts.length === 1 && !params.has('target_session_attrs') && !params.has('connect_timeout');
  return { hosts, targetSessionAttrs, connectTimeoutMs, perHost, plain, display };
}

export function hostLabel(h: HostPort): string {
  return h.host.includes(':') ? `[${h.host}]:${h.port}` : `${h.host}:${h.port}`;
}

/** A URL pg reads (pg-connection-string): user and password in the authority, the host and port
 *  as parameters (which also carries IPv6 and socket directories), the rest as given. */
function hostUrl(h: HostPort, rest: [string, string][]): string {
  const user = rest.find(([k]) => k === 'user')?.[1];
  const password = rest.find(([k]) => k === 'password')?.[1];
  const dbname = rest.find(([k]) => k === 'dbname')?.[1];
  const userinfo = user !== undefined ? `${encodeURIComponent(user)}${password !== undefined ? `:${encodeURIComponent(password)}` : ''}@` : '';
  const query = [
    ['host', h.host] as [string, string],
    ['port', String(h.port)] as [string, string],
    ...rest.filter(([k]) => !['user', 'password', 'dbname'].includes(k)),
  ]
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join('&');
  return `postgres://${userinfo}/${dbname !== undefined ? encodeURIComponent(dbname) : ''}?${query}`;
}
