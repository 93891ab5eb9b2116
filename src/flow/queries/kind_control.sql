-- kind_control: one kind's flow controls and what of it runs now (the kind_controls view).
--   $1 kind
-- @params kind: string
SELECT * FROM timeout_center.kind_controls WHERE kind = $1
