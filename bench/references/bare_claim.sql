-- The durable claim at its barest: take the lowest id nobody else holds and
-- delete it, one autocommitted statement. fairmatch's claim adds the job
-- row's update, its event and the request id to the same shape.
DELETE FROM bench_queue
WHERE id = (SELECT id FROM bench_queue ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING id;
