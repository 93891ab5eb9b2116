// The one place where the center's layout picks the statements of an external run (docs/scale.md
// "Citus: what runs"): on plain PostgreSQL, the claim and the record are one round trip each, and a
// first run may go in two phases; on the Citus layout (the shard has a bucket), each is a few
// router statements on the shard's bucket, and every run commits first (a prepared transaction
// would span the coordinator and a worker node).
import type pg from 'pg';
import type { ExternalTarget } from '../handlers.js';
import type { Lease } from '../lease.js';
import { claimInBucket, claimPlain, type Claimed } from './claim.js';
import { recordInBucket, recordPlain, type RecordForm } from './record.js';

export interface CenterForms {
  /** Step 1 of a commit-first run (claim.ts). Undefined when the lease is no longer ours. */
  claim: (pool: pg.Pool, lease: Lease, external: ExternalTarget) => Promise<Claimed | undefined>;
  /** Step 4 of a commit-first run (record.ts). */
  record: RecordForm;
  /** Whether a first run may commit in two phases (two-phase-run.ts). */
  twoPhase: boolean;
}

const PLAIN: CenterForms = { claim: claimPlain, record: recordPlain, twoPhase: true };
const CITUS: CenterForms = { claim: claimInBucket, record: recordInBucket, twoPhase: false };

/** The forms for a lease: plain PostgreSQL, or the Citus forms on the shard's bucket. */
export function centerForms(lease: Lease): CenterForms {
  return lease.bucket === null ? PLAIN : CITUS;
}
