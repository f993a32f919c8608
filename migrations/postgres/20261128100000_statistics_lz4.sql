-- A batch's statistics are doubles, mostly incompressible on dense inputs but full of zeros on
-- sparse ones (recipes, indicator features). pglz tried on every batch cost ingestion a few
-- percent of PostgreSQL's CPU; lz4 gives up on incompressible bytes at a fraction of that cost
-- and still shrinks the sparse ones. Only servers built with lz4 (PostgreSQL 14 and later, as
-- Debian's and the official images are) have it; elsewhere the column keeps pglz.
DO $$
BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings WHERE name = 'default_toast_compression') THEN
        EXECUTE 'ALTER TABLE batches ALTER COLUMN statistics SET COMPRESSION lz4';
    END IF;
END
$$;
