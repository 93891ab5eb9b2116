-- target_names: the declared business databases, for the error naming an unknown one.
SELECT target FROM timeout_center.targets ORDER BY target
