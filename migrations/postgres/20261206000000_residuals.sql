-- A fold adds each batch's residuals (from the model before the batch) to the evidence that
-- chooses its outputs' noise shapes, and records that evidence beside the batch (estimator
-- codec, magic "MRDR"), so that replaying a thin version adds the same evidence without the
-- batch's raw rows, which retention may have purged. NULL: the fold added none.
ALTER TABLE batches ADD COLUMN residuals bytea;
COMMENT ON COLUMN batches.residuals IS
    'The shape evidence of the batch''s residuals that its fold added to the model (estimator '
    'codec), for a replay of that fold; NULL where it added none';
