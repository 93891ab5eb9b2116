-- 0001_init: the timeout center's tables, indexes and inspection views.
-- Migrations are append-only: never edit this file once released; add 0002_*.sql instead.

CREATE SCHEMA IF NOT EXISTS timeout_center;

-- Every kind a timeout may have. Rows are written from the config file (`timeout-center migrate`
-- and every coordinator/worker start), so an INSERT of an unknown kind fails on the foreign key.
CREATE TABLE timeout_center.kinds (
  kind          text PRIMARY KEY CHECK (kind ~ '^[a-z0-9][a-z0-9_.:-]{0,99}$'),
  shard_size    integer NOT NULL DEFAULT 500 CHECK (shard_size BETWEEN 1 AND 100000),
  max_attempts  integer NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 1000),
  backoff_ms    integer NOT NULL DEFAULT 1000 CHECK (backoff_ms >= 0),
  handler_type  text NOT NULL DEFAULT 'sql',
  description   text,
  updated_at    timestamptz NOT NULL DEFAULT now()
);

-- One row per deadline. Business services INSERT here inside their own transaction.
CREATE TABLE timeout_center.timeouts (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind          text NOT NULL REFERENCES timeout_center.kinds (kind)
                  ON UPDATE CASCADE ON DELETE RESTRICT,
  biz_id        text NOT NULL CHECK (length(biz_id) BETWEEN 1 AND 200),
  due_at        timestamptz NOT NULL,
  payload       jsonb,
  state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'dispatched', 'done', 'cancelled', 'failed')),
  -- When the row may be claimed: due_at, or later while it backs off after a failed attempt.
  -- Kept equal to due_at by trigger on insert and on any change of due_at.
  available_at  timestamptz NOT NULL,
  attempts      integer NOT NULL DEFAULT 0,
  shard_id      bigint,
  -- 'applied' (the handler changed the object) or 'skipped' (nothing to change, e.g. already paid).
  result        text CHECK (result IN ('applied', 'skipped')),
  last_error    text,
  created_at    timestamptz NOT NULL DEFAULT now(),
  finished_at   timestamptz
);

-- At most one live timeout per business object and kind. A second plain INSERT is rejected with
-- this constraint's name; use INSERT ... ON CONFLICT (kind, biz_id) WHERE state IN
-- ('pending','dispatched') DO UPDATE to upsert (what schedule() does).
CREATE UNIQUE INDEX timeouts_one_live_per_biz
  ON timeout_center.timeouts (kind, biz_id) WHERE state IN ('pending', 'dispatched');
-- The claim and the "next due" look-up walk this index in due order; future rows cost nothing.
CREATE INDEX timeouts_claimable ON timeout_center.timeouts (available_at) WHERE state = 'pending';
-- A worker locks the live rows of its shard through this one; rows leave it once final.
CREATE INDEX timeouts_in_flight ON timeout_center.timeouts (shard_id) WHERE state = 'dispatched';
CREATE INDEX timeouts_failed ON timeout_center.timeouts (kind, finished_at) WHERE state = 'failed';
-- Retention purges final rows by age.
CREATE INDEX timeouts_finished ON timeout_center.timeouts (finished_at) WHERE finished_at IS NOT NULL;

CREATE FUNCTION timeout_center.timeouts_before_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    NEW.available_at := NEW.due_at;
    IF NEW.state IS DISTINCT FROM 'pending' THEN
      RAISE EXCEPTION 'timeout_center.timeouts: a new timeout must be inserted as pending, not %', NEW.state
        USING ERRCODE = 'check_violation', HINT = 'leave the state column out of the INSERT';
    END IF;
  ELSIF NEW.due_at IS DISTINCT FROM OLD.due_at THEN
    -- Rescheduling: only a pending timeout moves; an in-flight one is already being applied.
    IF OLD.state <> 'pending' THEN
      RAISE EXCEPTION 'timeout_center.timeouts: timeout % (% %) is %, only a pending timeout can be rescheduled',
        OLD.id, OLD.kind, OLD.biz_id, OLD.state USING ERRCODE = 'check_violation';
    END IF;
    NEW.available_at := NEW.due_at;
    NEW.attempts := 0;
  END IF;
  RETURN NEW;
END $$;

-- Only INSERT and changes of due_at fire it: the hot path (claim, complete) pays nothing.
CREATE TRIGGER timeouts_before_write
  BEFORE INSERT OR UPDATE OF due_at ON timeout_center.timeouts
  FOR EACH ROW EXECUTE FUNCTION timeout_center.timeouts_before_write();

-- The single-row fencing record. Whoever becomes leader increments epoch; every coordinator write
-- runs in a transaction that first locks this row FOR SHARE and checks its own epoch.
CREATE TABLE timeout_center.coordinator_lease (
  id           integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
  epoch        bigint NOT NULL DEFAULT 0,
  holder       text,
  acquired_at  timestamptz
);
INSERT INTO timeout_center.coordinator_lease (id) VALUES (1);

-- One row per coordinator tick that found something due (SchedulerX's "job instance").
CREATE TABLE timeout_center.scans (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  epoch           bigint NOT NULL,
  coordinator     text NOT NULL,
  cutoff          timestamptz NOT NULL,
  state           text NOT NULL DEFAULT 'mapping' CHECK (state IN ('mapping', 'mapped', 'reduced')),
  claimed         integer NOT NULL DEFAULT 0,
  shard_count     integer NOT NULL DEFAULT 0,
  -- Totals, written once by reduce.
  done            integer,
  skipped         integer,
  failed          integer,
  retried         integer,
  failures        jsonb,
  started_at      timestamptz NOT NULL DEFAULT now(),
  mapped_at       timestamptz,
  reduced_at      timestamptz
);
CREATE INDEX scans_open ON timeout_center.scans (id) WHERE state <> 'reduced';
CREATE INDEX scans_reduced_at ON timeout_center.scans (reduced_at);

-- One row per unit of work handed to a worker.
CREATE TABLE timeout_center.shards (
  id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  scan_id           bigint NOT NULL REFERENCES timeout_center.scans (id) ON DELETE CASCADE,
  kind              text NOT NULL,
  seq               integer NOT NULL,
  size              integer NOT NULL,
  state             text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'done', 'failed')),
  attempts          integer NOT NULL DEFAULT 0,
  owner             text,
  lease_token       uuid,
  lease_expires_at  timestamptz,
  published_at      timestamptz,
  publish_count     integer NOT NULL DEFAULT 0,
  done_count        integer,
  skipped_count     integer,
  failed_count      integer,
  retried_count     integer,
  error_sample      text,
  created_at        timestamptz NOT NULL DEFAULT now(),
  started_at        timestamptz,
  finished_at       timestamptz,
  UNIQUE (scan_id, kind, seq)
);
CREATE INDEX shards_in_flight ON timeout_center.shards (state, lease_expires_at) WHERE state IN ('queued', 'running');

-- Worker processes announce themselves here (status / live workers).
CREATE TABLE timeout_center.workers (
  worker_id     text PRIMARY KEY,
  host          text NOT NULL,
  pid           integer NOT NULL,
  kinds         text[] NOT NULL,
  started_at    timestamptz NOT NULL DEFAULT now(),
  last_seen_at  timestamptz NOT NULL DEFAULT now(),
  stopped_at    timestamptz
);

-- Inspection views -----------------------------------------------------------------------------

CREATE VIEW timeout_center.scan_report AS
SELECT s.id AS scan_id, s.state, s.cutoff, s.claimed, s.shard_count,
       s.done, s.skipped, s.failed, s.retried,
       s.started_at, s.mapped_at, s.reduced_at,
       s.reduced_at - s.started_at AS duration,
       s.epoch, s.coordinator, s.failures
  FROM timeout_center.scans s;

CREATE VIEW timeout_center.shard_report AS
SELECT sh.id AS shard_id, sh.scan_id, sh.kind, sh.size, sh.state, sh.attempts, sh.owner,
       sh.lease_expires_at, sh.done_count AS done, sh.skipped_count AS skipped,
       sh.failed_count AS failed, sh.retried_count AS retried, sh.error_sample,
       sh.created_at, sh.started_at, sh.finished_at,
       sh.finished_at - sh.started_at AS duration, sh.publish_count
  FROM timeout_center.shards sh;

CREATE VIEW timeout_center.failed_timeouts AS
SELECT t.id AS timeout_id, t.kind, t.biz_id, t.due_at, t.attempts, t.last_error,
       t.shard_id, sh.scan_id, t.finished_at AS failed_at, t.payload
  FROM timeout_center.timeouts t
  LEFT JOIN timeout_center.shards sh ON sh.id = t.shard_id
 WHERE t.state = 'failed';

-- Due but not final, per kind: how much is waiting and how late the oldest one is. Both halves
-- read partial indexes, so the view stays cheap with millions of future timeouts pending.
CREATE VIEW timeout_center.backlog AS
SELECT kind,
       count(*) FILTER (WHERE state = 'pending') AS pending_due,
       count(*) FILTER (WHERE state = 'dispatched') AS in_flight,
       min(due_at) AS oldest_due_at,
       now() - min(due_at) AS oldest_lag
  FROM (SELECT kind, state, due_at FROM timeout_center.timeouts
         WHERE state = 'pending' AND available_at <= now()
        UNION ALL
        SELECT kind, state, due_at FROM timeout_center.timeouts
         WHERE state = 'dispatched' AND shard_id IS NOT NULL) due
 GROUP BY kind;
