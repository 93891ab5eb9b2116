-- kind_names: the declared kinds, for the error naming an unknown one.
SELECT kind FROM timeout_center.kinds ORDER BY kind
