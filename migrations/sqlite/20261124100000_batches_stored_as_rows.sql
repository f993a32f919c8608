-- A batch whose raw rows take fewer bytes than its sufficient statistics is stored with empty
-- statistics, and the folder forms them from its rows (x, y). A binary from before this cannot
-- read such a batch: this migration makes it refuse the database at start-up (an applied
-- migration it does not know) instead of rejecting those batches. Nothing changes in the
-- schema.
SELECT 1;
