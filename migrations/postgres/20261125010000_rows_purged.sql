-- Retention (`retention.raw_rows_days`): a purge empties the raw rows (x, y) of batches folded
-- or rejected that arrived long enough ago, and notes when. Their statistics, the versions and the batch's
-- record stay. A binary from before this refuses the database at start-up (an applied
-- migration it does not know) instead of reading purged rows as a batch of no rows.
ALTER TABLE batches ADD COLUMN rows_purged_at TIMESTAMPTZ;
COMMENT ON COLUMN batches.rows_purged_at IS
    'When retention emptied x and y (NULL while the raw rows are kept)';
-- What the purge looks for, oldest first, without walking the batches it has purged.
CREATE INDEX batches_unpurged ON batches (received_at, seq)
    WHERE rows_purged_at IS NULL AND status IN ('folded', 'rejected');
