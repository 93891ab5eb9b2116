-- kind_controls: every kind's flow controls and what of it runs now (the kind_controls view, sql/0006).
SELECT * FROM timeout_center.kind_controls ORDER BY kind
