-- Raw rows are little-endian doubles, which PostgreSQL's pglz cannot shrink: store them out of
-- line without trying (it cost ingestion a percent of its CPU for nothing).
ALTER TABLE batches
    ALTER COLUMN x SET STORAGE EXTERNAL,
    ALTER COLUMN y SET STORAGE EXTERNAL;
