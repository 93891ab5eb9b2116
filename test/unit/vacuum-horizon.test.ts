// The vacuum horizon's policy (operations/vacuum-horizon.ts): when a holder warns, what the message
// says for each kind of holder, and how the config's alerts section sets the limits.
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import {
  formatAge,
  HORIZON_DEFAULTS,
  horizonLimits,
  horizonMessage,
  horizonSeverity,
  oldestByKind,
  type HorizonHolder,
} from '../../src/operations/vacuum-horizon.js';

const holder = (over: Partial<HorizonHolder>): HorizonHolder => ({
  holder: 'backend',
  pid: 4242,
  applicationName: 'pg_dump',
  user: 'backup',
  state: 'active',
  backendType: 'client backend',
  xactStart: null,
  queryStart: null,
  query: 'COPY public.orders TO stdout',
  clientAddr: '10.0.0.5',
  slot: null,
  slotType: null,
  gid: null,
  preparedAt: null,
  scope: 'all tables',
  xidAge: 1000,
  seconds: 10,
  ...over,
});

describe('vacuum horizon policy', () => {
  it('the config defaults are HORIZON_DEFAULTS: 5 min, 10 million transactions; critical at 1 h, 100 million', () => {
    const config = parseConfig({ kinds: { 'order.unpaid': { handler: { type: 'sql', sql: 'SELECT 1' } } } }, 'test');
    expect(config.alerts.vacuumHorizonMs).toBe(300_000);
    expect(config.alerts.vacuumHorizonXids).toBe(10_000_000);
    expect(config.coordinator.horizonCheckIntervalMs).toBe(15_000);
    expect(horizonLimits(config.alerts)).toEqual(HORIZON_DEFAULTS);
    expect(horizonLimits({ vacuumHorizonMs: 2000, vacuumHorizonXids: 1000 })).toEqual({
      warnSeconds: 2,
      warnXids: 1000,
      criticalSeconds: 3600,
      criticalXids: 100_000_000,
    });
  });

  it('time decides where it is known, transactions where it is not; wraparound territory is critical whatever the time', () => {
    const limits = HORIZON_DEFAULTS;
    expect(horizonSeverity(holder({ seconds: 299 }), limits)).toBeNull();
    expect(horizonSeverity(holder({ seconds: 300 }), limits)).toBe('warning');
    // A busy server's 20 million transactions in 4 minutes: the time says not yet.
    expect(horizonSeverity(holder({ seconds: 240, xidAge: 20_000_000 }), limits)).toBeNull();
    expect(horizonSeverity(holder({ seconds: 3600 }), limits)).toBe('critical');
    expect(horizonSeverity(holder({ seconds: 10, xidAge: 100_000_000 }), limits)).toBe('critical');
    const slot = holder({ holder: 'replication_slot', pid: null, seconds: null, slot: 'standby_1', slotType: 'physical' });
    expect(horizonSeverity({ ...slot, xidAge: 9_999_999 }, limits)).toBeNull();
    expect(horizonSeverity({ ...slot, xidAge: 10_000_000 }, limits)).toBe('warning');
  });

  it('the message names the holder, its age and what to do, for each kind', () => {
    expect(horizonMessage('center', holder({ seconds: 725, xidAge: 184_120 }))).toBe(
      'center: backend pid 4242 (pg_dump, backup, active) has held back VACUUM for 12 min 5 s (184,120 transactions): rows deleted since stay on disk and the queue slows while it lasts; if it is a forgotten session or a report that can wait, end it: SELECT pg_terminate_backend(4242); a pg_dump: run it from a standby or at a quieter hour',
    );
    const logical = holder({
      holder: 'replication_slot',
      pid: null,
      seconds: null,
      slot: 'orders_sub',
      slotType: 'logical',
      state: 'inactive',
      scope: 'system catalogs',
    });
    expect(horizonMessage('shop', logical)).toContain(
      'shop: replication slot orders_sub (logical, inactive) has held back VACUUM for 1,000 transactions (the system catalogs only',
    );
    expect(horizonMessage('shop', logical)).toContain("check the subscriber; if it is gone for good, SELECT pg_drop_replication_slot('orders_sub')");
    const prepared = holder({ holder: 'prepared_transaction', pid: null, gid: 'tc-x:12:1', user: 'tc', preparedAt: new Date('2026-11-28T10:00:00Z') });
    expect(horizonMessage('center', prepared)).toContain("its resolver commits or rolls it back (docs/operations.md); by hand: ROLLBACK PREPARED 'tc-x:12:1'");
    const standby = holder({ holder: 'standby_feedback', applicationName: 'replica_2', seconds: null, scope: 'every database' });
    expect(horizonMessage('center', standby)).toContain(
      'standby feedback from pid 4242 (replica_2 at 10.0.0.5) has held back VACUUM for 1,000 transactions (every database of the server)',
    );
  });

  it('oldestByKind keeps the oldest of each kind; formatAge', () => {
    const a = holder({ pid: 1, xidAge: 5 });
    const b = holder({ pid: 2, xidAge: 50 });
    const p = holder({ holder: 'prepared_transaction', xidAge: 7 });
    expect(oldestByKind([a, b, p])).toEqual([b, p]);
    expect([40, 300, 725, 7200, 7260, 90_000].map(formatAge)).toEqual(['40 s', '5 min', '12 min 5 s', '2 h', '2 h 1 min', '1 d 1 h']);
  });
});
