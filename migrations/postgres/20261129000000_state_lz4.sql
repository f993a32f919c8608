-- A version's state is doubles: a posterior factor per output, 3.7 MB each on a 700-band model,
-- which pglz cannot shrink but tries anyway, on every fold (a quarter of a second for a
-- 10-output wide model's 22 MB, under the model's lock). lz4 passes over incompressible bytes
-- many times faster and still shrinks a sparse state. Servers without lz4 store the state as it
-- is, uncompressed, rather than let pglz try.
DO $$
BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings WHERE name = 'default_toast_compression') THEN
        EXECUTE 'ALTER TABLE versions ALTER COLUMN state SET COMPRESSION lz4';
    ELSE
        EXECUTE 'ALTER TABLE versions ALTER COLUMN state SET STORAGE EXTERNAL';
    END IF;
END
$$;
