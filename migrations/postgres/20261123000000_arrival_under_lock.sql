-- A batch's place in its model's queue (`arrival`) is taken apart from its row (`seq`).
--
-- Ingestion writes a batch's row (its raw rows, some 280 kB for 1,000 rows of 35 numbers) before
-- it takes its model's lock, so concurrent requests write their rows in parallel; under the
-- lock it only numbers the batch and commits. The lock is held until the commit, so within a
-- model the order of `arrival` is the order in which batches became visible: a folder never
-- sees a later batch without the earlier ones. `arrival` is NULL only inside the inserting
-- transaction; the queue is folded in `arrival` order.
CREATE SEQUENCE batch_arrival AS BIGINT;
ALTER TABLE batches ADD COLUMN arrival BIGINT UNIQUE;
UPDATE batches SET arrival = seq;
SELECT setval('batch_arrival', COALESCE(max(seq), 0) + 1, false) FROM batches;

DROP INDEX batches_queued;
CREATE INDEX batches_queued ON batches (model_id, arrival) WHERE status = 'queued';
