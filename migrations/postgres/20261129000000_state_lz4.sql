-- A version's state is doubles, a p × p posterior factor per output on a wide model, which pglz
-- cannot shrink but tries anyway, on every fold and under the model's lock (docs/performance.md,
-- "A wide model's fold"). lz4 passes over incompressible bytes many times faster and still
-- shrinks a sparse state. Servers without lz4 store the state as it is, uncompressed, rather
-- than let pglz try.
DO $$
BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings WHERE name = 'default_toast_compression') THEN
        EXECUTE 'ALTER TABLE versions ALTER COLUMN state SET COMPRESSION lz4';
    ELSE
        EXECUTE 'ALTER TABLE versions ALTER COLUMN state SET STORAGE EXTERNAL';
    END IF;
END
$$;
