-- A fold records beside each batch the shape evidence of its residuals that it added to the
-- model: see migrations/postgres. NULL: the fold added none.
ALTER TABLE batches ADD COLUMN residuals BLOB;
