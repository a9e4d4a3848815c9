-- The queue drained: each of the six jobs succeeded and ran exactly once (one row in
-- `ran`), no row in `ran` for a job that is not there, none left 'todo' or 'doing'.
SELECT count(*) = 6
   AND bool_and(j.status = 'succeeded')
   AND bool_and((SELECT count(*) FROM ran r WHERE r.job_id = j.id) = 1)
   AND (SELECT count(*) FROM ran) = 6
  FROM procrastinate_jobs j
