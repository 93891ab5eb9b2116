-- target_controls: every business database's rate limit and what runs against it now (the
-- target_controls view, sql/0009).
SELECT * FROM timeout_center.target_controls ORDER BY target
