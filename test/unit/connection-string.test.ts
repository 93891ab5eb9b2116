// Connection strings in both libpq forms, one host or a list (src/db/connection-string.ts): what we
// accept, what pg then reads for each host, and a clear error naming what we refuse.
import { parse as pgParse } from 'pg-connection-string';
import { describe, expect, it } from 'vitest';
import { ConnectionStringError, parseConnectionString } from '../../src/db/connection-string.js';
import { loadConfig } from '../../src/config.js';

const hostsOf = (s: string): string[] => parseConnectionString(s).hosts.map((h) => `${h.host}:${h.port}`);

describe('URL form', () => {
  it('one host without target_session_attrs is plain: pg reads it unchanged', () => {
    const p = parseConnectionString('postgres://root:secret@127.0.0.1:5432/orders?sslmode=disable');
    expect(p.plain).toBe(true);
    expect(p.targetSessionAttrs).toBe('any');
    expect(hostsOf('postgres://root@127.0.0.1:5432/orders')).toEqual(['127.0.0.1:5432']);
    expect(p.display).toBe('127.0.0.1:5432/orders');
    expect(p.display).not.toContain('secret');
  });

  it('a host list with ports, target_session_attrs and connect_timeout', () => {
    const p = parseConnectionString('postgres://u:p%40ss@h1:5432,h2:5433/db?target_session_attrs=read-write&connect_timeout=3&application_name=x');
    expect(p.plain).toBe(false);
    expect(p.hosts).toEqual([
      { host: 'h1', port: 5432 },
      { host: 'h2', port: 5433 },
    ]);
    expect(p.targetSessionAttrs).toBe('read-write');
    expect(p.connectTimeoutMs).toBe(3000);
    expect(p.display).toBe('h1:5432,h2:5433/db (read-write)');
    // Each host's URL is one pg reads: that host, the same user, password, database and parameters.
    const second = pgParse(p.perHost[1]!);
    expect(second).toMatchObject({ host: 'h2', port: '5433', user: 'u', password: 'p@ss', database: 'db', application_name: 'x' });
    expect(second).not.toHaveProperty('target_session_attrs');
  });

  it('hosts without a port take 5432 or the port parameter; postgresql:// and IPv6 in brackets', () => {
    expect(hostsOf('postgresql://h1,h2/db')).toEqual(['h1:5432', 'h2:5432']);
    expect(hostsOf('postgres://h1,h2/db?port=6000')).toEqual(['h1:6000', 'h2:6000']);
    expect(hostsOf('postgres://[::1]:5433,[fe80::2]/db')).toEqual(['::1:5433', 'fe80::2:5432']);
    expect(parseConnectionString('postgres://[::1]:5433,h2/db').display).toBe('[::1]:5433,h2:5432/db');
    expect(pgParse(parseConnectionString('postgres://[::1]:5433,h2/db').perHost[0]!)).toMatchObject({ host: '::1', port: '5433' });
  });

  it('host= and port= parameters override the URL body, as in libpq', () => {
    expect(hostsOf('postgres:///db?host=a,b&port=1,2')).toEqual(['a:1', 'b:2']);
  });

  it('primary, any; connect_timeout 1 counts as 2 s and 0 as none (libpq)', () => {
    expect(parseConnectionString('postgres://h1,h2/db?target_session_attrs=primary').targetSessionAttrs).toBe('primary');
    expect(parseConnectionString('postgres://h1,h2/db?target_session_attrs=any').targetSessionAttrs).toBe('any');
    expect(parseConnectionString('postgres://h/db?connect_timeout=1').connectTimeoutMs).toBe(2000);
    expect(parseConnectionString('postgres://h/db?connect_timeout=0').connectTimeoutMs).toBeUndefined();
    // connect_timeout on one host is not plain: pg's JS client would ignore it.
    expect(parseConnectionString('postgres://h/db?connect_timeout=5').plain).toBe(false);
  });
});

describe('key-value form', () => {
  it('host and port lists, quoted values with escapes, spaces around =', () => {
    const p = parseConnectionString(`host=h1,h2 port=5432,5433 dbname=db user = root password='it''s'  target_session_attrs=primary`.replace("''", "\\'"));
    expect(p.hosts).toEqual([
      { host: 'h1', port: 5432 },
      { host: 'h2', port: 5433 },
    ]);
    expect(p.targetSessionAttrs).toBe('primary');
    expect(p.plain).toBe(false);
    expect(pgParse(p.perHost[0]!)).toMatchObject({ host: 'h1', port: '5432', user: 'root', password: "it's", database: 'db' });
    expect(pgParse(parseConnectionString(`host=h dbname='my db' options='-c search_path=x'`).perHost[0]!)).toMatchObject({
      database: 'my db',
      options: '-c search_path=x',
    });
  });

  it('one port for every host; a missing host is localhost; a Unix socket directory on its own', () => {
    expect(hostsOf('host=a,b port=7000 dbname=d')).toEqual(['a:7000', 'b:7000']);
    expect(hostsOf('dbname=d')).toEqual(['localhost:5432']);
    expect(pgParse(parseConnectionString('host=/var/run/postgresql dbname=d').perHost[0]!)).toMatchObject({ host: '/var/run/postgresql', database: 'd' });
  });
});

describe('refused, each with an error naming what', () => {
  const refused: [string, RegExp][] = [
    ['postgres://h1,h2/db?target_session_attrs=read-only', /target_session_attrs=read-only is not supported: the engine writes/],
    ['postgres://h1,h2/db?target_session_attrs=standby', /target_session_attrs=standby is not supported/],
    ['host=h1,h2 target_session_attrs=prefer-standby', /target_session_attrs=prefer-standby is not supported/],
    ['postgres://h/db?target_session_attrs=master', /target_session_attrs=master is not a libpq value; accepted: any, read-write, primary/],
    ['host=h hostaddr=10.0.0.1', /hostaddr is not supported: give the addresses in host/],
    ['postgres://h1,h2/db?load_balance_hosts=random', /load_balance_hosts is not supported: hosts are always tried in the order given/],
    ['service=prod', /service is not supported/],
    ['host=/tmp,h2', /Unix-domain socket directory cannot be part of a host list/],
    ['host=a,b,c port=1,2', /3 hosts but 2 ports/],
    ['postgres://h:99999/db', /port "99999" of host "h" is not a port number/],
    ['postgres://h/db?connect_timeout=3s', /connect_timeout=3s is not a whole number of seconds/],
    ["host='h1", /unterminated quoted value for host/],
    ['postgres://::1/db', /an IPv6 address goes in brackets|port/],
  ];
  for (const [s, error] of refused) {
    it(s, () => {
      expect(() => parseConnectionString(s)).toThrow(ConnectionStringError);
      expect(() => parseConnectionString(s)).toThrow(error);
    });
  }
  it('a string in neither libpq form (pg socket forms) is left to pg, unchanged', () => {
    expect(parseConnectionString('/var/run/postgresql mydb')).toMatchObject({ plain: true, hosts: [] });
    expect(parseConnectionString('socket:/var/run/postgresql?db=x')).toMatchObject({ plain: true, hosts: [] });
  });
  it('load_balance_hosts=disable is libpq default and accepted', () => {
    expect(hostsOf('postgres://h1,h2/db?load_balance_hosts=disable')).toEqual(['h1:5432', 'h2:5432']);
  });
});

describe('config', () => {
  const kinds = { k: { handler: { type: 'sql' as const, sql: 'SELECT $1::text[]' } } };
  it('a multi-host databaseUrl and business database URL load', () => {
    const c = loadConfig({
      object: {
        databaseUrl: 'postgres://h1:5432,h2:5432/center?target_session_attrs=read-write&connect_timeout=3',
        businessDatabases: { orders: { url: 'host=b1,b2 dbname=orders target_session_attrs=primary' } },
        kinds: { k: { handler: { type: 'sql', database: 'orders', sql: 'SELECT $1::text[]' } } },
      },
      env: { REDIS_URL: 'redis://127.0.0.1:6379' },
    });
    expect(c.databaseUrl).toContain('h1:5432,h2:5432');
    expect(c.businessDatabaseUrls['orders']).toContain('host=b1,b2');
  });
  it('one that cannot be used is a config error naming where it came from and why', () => {
    expect(() =>
      loadConfig({ object: { kinds }, env: { REDIS_URL: 'redis://127.0.0.1:6379', DATABASE_URL: 'postgres://h1,h2/db?target_session_attrs=standby' } }),
    ).toThrow(/DATABASE_URL: connection string: target_session_attrs=standby is not supported/);
    expect(() =>
      loadConfig({
        object: { databaseUrl: 'postgres://h/db', businessDatabases: { orders: { url: 'host=a hostaddr=1.2.3.4' } }, kinds },
        env: { REDIS_URL: 'redis://127.0.0.1:6379' },
      }),
    ).toThrow(/businessDatabases\.orders: connection string: hostaddr is not supported/);
  });
});
