-- Settle on read on the Citus layout: not built yet (docs/scale.md "Not done on Citus"). On one
-- PostgreSQL timeout_center.settle (sql/0021) and the Settler's bind (sql/0023) lock the timeout
-- by kind and biz_id with FOR UPDATE, which Citus refuses on the distributed timeouts ("could not
-- run distributed query with FOR UPDATE/SHARE commands"): a caller met that error with nothing to
-- tell it what to do. Here settle_run, which both call, refuses at once with a clear message and
-- SQLSTATE 0A000 (feature_not_supported), changing nothing; the HTTP API answers 501.
-- Applied by `timeout-center migrate` on a database with the Citus layout, after
-- sql/citus/layout.sql and at every migrate. Keep its signature in step with sql/0023.
CREATE OR REPLACE FUNCTION timeout_center.settle_run(p_kind text, p_biz_id text, p_wait_ms integer, p_owner text, p_lease_ms integer)
RETURNS TABLE (outcome text, timeout_id bigint, state text, due_at timestamptz, available_at timestamptz,
               result text, shard_id bigint, detail text, scan_id bigint, lease_token uuid)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION 'settle on read is not supported on a Citus timeout database yet (kind %, biz_id %): nothing was changed; the timeout closes when its shard runs, within a tick of its due time',
        p_kind, p_biz_id
    USING ERRCODE = 'feature_not_supported',
          HINT = 'read the timeout with SELECT ... FROM timeout_center.all_timeouts, or keep kinds that need settle on read on plain PostgreSQL (docs/scale.md "Not done on Citus")';
END
$$;
