import { describe, expect, it } from 'vitest';
import { ClaimFloors } from '../../src/coordinator/claim-floors.js';

describe('claim floors between ticks', () => {
  it('starts with no floor and no mark: the first tick reads every kind from its start', () => {
    const f = new ClaimFloors();
    expect(f.inputs()).toEqual({ floors: '{}', marks: '[]', shardsFrom: 0, scansFrom: 0, server: '', lateFrom: '' });
    expect(f.param()).toBe('{}');
  });

  it("keeps next_due's floors as keys of text (no rounding to milliseconds), its marks and the oldest shard in flight", () => {
    const f = new ClaimFloors();
    f.update({
      floors: { 'order.unpaid': ['2026-11-28 16:00:00.123456+00', '9007199254740993'] },
      mark_at: '2026-11-28 16:00:01.5+00',
      mark_xid: '100',
      xmin: '90',
      in_flight_from: '42',
    });
    expect(JSON.parse(f.param())).toEqual({ 'order.unpaid': ['2026-11-28 16:00:00.123456+00', '9007199254740993'] });
    expect(f.shardsFrom()).toBe(42);
    expect(JSON.parse(f.inputs().marks)).toEqual([{ at: '2026-11-28 16:00:01.5+00', xid: '100' }]);
  });

  it('drops the marks older than the newest one every running transaction began after', () => {
    const f = new ClaimFloors();
    for (let i = 1; i <= 5; i++) f.update({ mark_at: `t${i}`, mark_xid: String(i * 10), xmin: '1' });
    f.update({ xmin: '35' }); // marks 10, 20, 30 are older than every running transaction: 30 is the one to keep
    expect(JSON.parse(f.inputs().marks).map((m: { xid: string }) => m.xid)).toEqual(['30', '40', '50']);
    f.update({ xmin: '18446744073709551615' }); // xid8 beyond 2^53: compared as BigInt
    expect(JSON.parse(f.inputs().marks).map((m: { xid: string }) => m.xid)).toEqual(['50']);
  });

  it('keeps at most 64 marks, the oldest among them, while a long writer holds the horizon', () => {
    const f = new ClaimFloors();
    for (let i = 1; i <= 200; i++) f.update({ mark_at: `t${i}`, mark_xid: String(i), xmin: '1' });
    const xids = JSON.parse(f.inputs().marks).map((m: { xid: string }) => Number(m.xid));
    expect(xids).toHaveLength(64);
    expect(xids[0]).toBe(1);
    expect(xids.at(-1)).toBe(200);
  });

  it('hands the next tick the xmin of the tick its floors came from: its late probe reads the rows written late from there (sql/0054)', () => {
    const f = new ClaimFloors();
    f.update({ floors: { k: ['x', '1'] }, mark_at: 't1', mark_xid: '50', xmin: '45' });
    expect(f.inputs().lateFrom).toBe('45');
    f.update({ xmin: '60' }); // no floors: the late probe must still read from the floors' own tick
    expect(f.inputs().lateFrom).toBe('45');
    f.update({ floors: { k: ['y', '2'] }, mark_at: 't2', mark_xid: '70', xmin: '18446744073709551615' });
    expect(f.inputs().lateFrom).toBe('18446744073709551615');
  });

  it('on the Citus layout (no floors returned) stays as it was', () => {
    const f = new ClaimFloors();
    f.update({ floors: { k: ['x', '1'] } });
    f.update({});
    expect(f.floorOf('k')).toEqual(['x', '1']);
  });

  it('forgets floors, marks and the shards in flight after a failed tick (a failover may have lost claims)', () => {
    const f = new ClaimFloors();
    f.update({ floors: { k: ['x', '1'] }, mark_at: 't', mark_xid: '5', xmin: '1', in_flight_from: '7' });
    f.reset();
    expect(f.inputs()).toEqual({ floors: '{}', marks: '[]', shardsFrom: 0, scansFrom: 0, server: '', lateFrom: '' });
  });

  it('drops what was computed on another server: next_due ran on a new primary (or a restarted one), which left the inputs out', () => {
    const f = new ClaimFloors();
    f.update({ server: 'A', floors: { k: ['x', '9'] }, mark_at: 't1', mark_xid: '500', xmin: '1', in_flight_from: '70', open_scans_from: '30' });
    expect(f.inputs().server).toBe('A');
    f.update({ server: 'B', floors: { k: ['w', '1'] }, mark_at: 't2', mark_xid: '400', xmin: '1', in_flight_from: '3' });
    expect(f.inputs()).toEqual({
      floors: JSON.stringify({ k: ['w', '1'] }),
      marks: JSON.stringify([{ at: 't2', xid: '400' }]),
      shardsFrom: 3,
      scansFrom: 0,
      server: 'B',
      lateFrom: '1',
    });
  });
});
