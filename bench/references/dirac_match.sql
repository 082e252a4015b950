-- DIRAC's TaskQueueDB.matchAndGetJob transcribed onto fairmatch's tables and DIRAC's
-- value tables built from them (bench_tq_*):
-- no locks, every statement autocommitted (see bench/references.py).
-- :n is the number of rows of bench_pilots; each transaction is one pilot.
\set p random(1, :n)
-- matchAndGetTaskQueue: the eligible queues, one drawn by RAND()/Priority.
-- COALESCE(…, 0) keeps one row for \gset when nothing is eligible.
SELECT COALESCE((
    SELECT tq.id
    FROM task_queues AS tq, bench_pilots AS p
    WHERE p.id = :p
      AND tq.cpu_time <= p.cpu_time
      AND (NOT EXISTS (SELECT 1 FROM bench_tq_sites AS v WHERE v.tq_id = tq.id)
           OR p.site IN (SELECT v.value FROM bench_tq_sites AS v WHERE v.tq_id = tq.id))
      AND p.site NOT IN (SELECT v.value FROM bench_tq_banned_sites AS v WHERE v.tq_id = tq.id)
      AND (p.platforms IS NULL
           OR NOT EXISTS (SELECT 1 FROM bench_tq_platforms AS v WHERE v.tq_id = tq.id)
           OR EXISTS (SELECT 1 FROM bench_tq_platforms AS v WHERE v.tq_id = tq.id AND v.value = ANY (p.platforms)))
      AND (p.job_types IS NULL
           OR NOT EXISTS (SELECT 1 FROM bench_tq_job_types AS v WHERE v.tq_id = tq.id)
           OR EXISTS (SELECT 1 FROM bench_tq_job_types AS v WHERE v.tq_id = tq.id AND v.value = ANY (p.job_types)))
      AND NOT EXISTS (SELECT 1 FROM bench_tq_tags AS v WHERE v.tq_id = tq.id)
      AND EXISTS (SELECT 1 FROM tq_jobs AS j WHERE j.tq_id = tq.id)
    ORDER BY random() / tq.priority
    LIMIT 1), 0) AS tq \gset
\if :tq > 0
-- a job of that queue, drawn uniformly (DIRAC: ORDER BY RAND())
SELECT COALESCE((SELECT job_id FROM tq_jobs WHERE tq_id = :tq ORDER BY random() LIMIT 1), 0) AS job \gset
\if :job > 0
-- deleteJob: the affected-row count says whether this pilot won the job
WITH d AS (DELETE FROM tq_jobs WHERE job_id = :job RETURNING 1)
SELECT count(*) AS deleted FROM d \gset
\if :deleted > 0
UPDATE jobs SET status = 'Matched' WHERE id = :job;
\else
-- another pilot deleted it first: DIRAC would try its next candidate
INSERT INTO bench_lost_races VALUES (:job);
\endif
\else
-- the queue emptied between the two reads: DIRAC would try the next queue
INSERT INTO bench_lost_races VALUES (0);
\endif
\endif
