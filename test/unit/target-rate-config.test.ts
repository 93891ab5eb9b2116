// businessDatabases.<name>.rateLimit: the default of a business database's fleet-wide rate limit
// (timeouts per second over all kinds whose shards target it; sql/0009). What is accepted, and the
// errors for what is not.
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig, type ConfigInput } from '../../src/config.js';
import { RateBudget } from '../../src/flow/rate-budget.js';

const SQL = "UPDATE orders SET status = 'closed' WHERE id = ANY($1) AND status = 'unpaid' RETURNING id";

function config(rateLimit: unknown): ConfigInput {
  return {
    businessDatabases: {
      orders_0: { url: 'postgres://a/o0', rateLimit } as NonNullable<ConfigInput['businessDatabases']>[string],
      orders_1: { url: 'postgres://b/o1' },
    },
    kinds: { 'order.unpaid': { handler: { type: 'sql', sql: SQL, route: { by: 'modulo', databases: ['orders_0', 'orders_1'] } } } },
  };
}

function problems(input: ConfigInput): string {
  try {
    parseConfig(input, 'x.yaml');
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected the config to be refused');
}

describe('businessDatabases.<name>.rateLimit', () => {
  it('is optional (no limit) and takes any number of timeouts per second above 0', () => {
    const plain = parseConfig(config(undefined));
    expect(plain.businessDatabases['orders_0']?.rateLimit).toBeUndefined();
    expect(plain.businessDatabases['orders_1']?.rateLimit).toBeUndefined();
    expect(parseConfig(config(1000)).businessDatabases['orders_0']?.rateLimit).toBe(1000);
    expect(parseConfig(config(0.5)).businessDatabases['orders_0']?.rateLimit).toBe(0.5);
    expect(parseConfig(config(10_000_000)).businessDatabases['orders_0']?.rateLimit).toBe(10_000_000);
  });

  it('refuses 0, a negative number, too much, and a string, naming the field', () => {
    expect(problems(config(0))).toMatch(/businessDatabases\.orders_0\.rateLimit: a rate limit is timeouts per second above 0; leave it out for no limit/);
    expect(problems(config(-5))).toMatch(/businessDatabases\.orders_0\.rateLimit: a rate limit is timeouts per second above 0/);
    expect(problems(config(20_000_000))).toMatch(/businessDatabases\.orders_0\.rateLimit: at most 10000000 timeouts per second/);
    expect(problems(config('1000/s'))).toMatch(/businessDatabases\.orders_0\.rateLimit/);
  });
});

describe('a token bucket per business database (RateBudget keyed by target)', () => {
  it('starts empty, refills at the rate, and is spent by what the plans give', () => {
    const b = new RateBudget();
    expect(b.refill(new Map([['orders_0', 1000]]), 0)).toEqual({ orders_0: 0 });
    expect(b.refill(new Map([['orders_0', 1000]]), 100)).toEqual({ orders_0: 100 });
    b.spend(new Map([['orders_0', 100]]));
    expect(b.refill(new Map([['orders_0', 1000]]), 150)).toEqual({ orders_0: 50 });
    // A lowered limit refills at the new rate from now on; a lifted one forgets the bucket.
    expect(b.refill(new Map([['orders_0', 250]]), 350)).toEqual({ orders_0: 125 });
    expect(b.refill(new Map(), 400)).toEqual({});
  });
});
