-- A batch's place in its model's queue (`arrival`) is taken apart from its row (`seq`).
--
-- Ingestion writes a batch's row (its raw rows, some 280 kB for 1,000 rows of 35 numbers) before
-- it takes its model's lock, so concurrent requests write their rows in parallel; under the
-- lock it only numbers the batch and commits. The lock is held until the commit, so within a
-- model the order of `arrival` is the order in which batches became visible: a folder never
-- sees a later batch without the earlier ones. The queue is folded in `arrival` order.
--
-- The service inserts a batch with `arrival` NULL and numbers it under the lock. The default
-- numbers the batches of a replica still running the previous release (which takes the lock
-- before inserting). Batches folded before this migration keep NULL: their order is `seq`.
-- No statement here rewrites the table: the column has no default when it is added, and only
-- queued batches are numbered.
CREATE SEQUENCE batch_arrival AS BIGINT;
ALTER TABLE batches ADD COLUMN arrival BIGINT;
SELECT setval('batch_arrival', COALESCE(max(seq), 0) + 1, false) FROM batches;
UPDATE batches SET arrival = seq WHERE status = 'queued';
ALTER TABLE batches ALTER COLUMN arrival SET DEFAULT nextval('batch_arrival');

DROP INDEX batches_queued;
CREATE INDEX batches_queued ON batches (model_id, arrival) WHERE status = 'queued';
