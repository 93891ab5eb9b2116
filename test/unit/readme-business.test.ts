// The README's business-databases config block is a valid config, as written.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseConfig } from '../../src/config.js';
import { centerKinds, storeLayout } from '../../src/stores/layout.js';

describe('README: business databases example', () => {
  it('parses and validates', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const block = /```yaml\n(# business databases example[\s\S]*?)```/.exec(readme)?.[1];
    expect(block, 'the README block marked "business databases example"').toBeDefined();
    const config = parseConfig(parse(block!), 'README.md');
    const handler = config.kinds['order.unpaid']!.handler;
    expect(handler.type === 'sql' && handler.route).toEqual({ by: 'modulo', databases: ['orders_0', 'orders_1'] });
    expect(config.businessDatabases['orders_0']).toEqual({ urlEnv: 'ORDERS_0_URL', poolSize: 4 });
  });

  it('the stores example parses: one kind stored beside its orders in three stores', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const block = /```yaml\n(# stores example[\s\S]*?)```/.exec(readme)?.[1];
    expect(block, 'the README block marked "stores example"').toBeDefined();
    const config = parseConfig(parse(block!), 'README.md');
    expect(config.kinds['order.unpaid']!.store).toBe('beside');
    // It sets a Redis key prefix, as the text after it says a deployment sharing a Redis must.
    expect(config.redisKeyPrefix).not.toBe('tc');
    expect([...storeLayout(config.kinds)]).toEqual([
      ['orders_0', ['order.unpaid']],
      ['orders_1', ['order.unpaid']],
      ['orders_2', ['order.unpaid']],
    ]);
    expect(centerKinds(config.kinds)).toEqual([]);
  });
});
