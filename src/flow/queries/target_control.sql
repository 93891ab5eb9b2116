-- target_control: one business database's controls (the target_controls view).
--   $1 target
-- @params target: string
SELECT * FROM timeout_center.target_controls WHERE target = $1
