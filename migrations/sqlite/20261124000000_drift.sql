-- Drift and bad-batch detection: each batch's surprise to the posterior it met when folded,
-- and batches held for review when it exceeds their model's threshold (migrations/postgres).
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt, keeping every row,
-- its seq and the AUTOINCREMENT counter.

CREATE TABLE batches_new (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    model_id        INTEGER NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    batch_id        TEXT NOT NULL,
    content_hash    BLOB NOT NULL,
    rows            INTEGER NOT NULL CHECK (rows > 0),
    statistics      BLOB NOT NULL,
    status          TEXT NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'folded', 'rejected', 'held')),
    received_at     TEXT NOT NULL,
    folded_at       TEXT,
    version         INTEGER,
    error           TEXT,
    -- z per output as a JSON array (null for an output not trained then); NULL until computed,
    -- and for batches of the first fit.
    surprise        TEXT CHECK (surprise IS NULL OR json_valid(surprise)),
    -- Released by an admin after a hold: folded whatever its surprise.
    released        INTEGER NOT NULL DEFAULT 0 CHECK (released IN (0, 1)),
    -- Raw rows last, as before: the folder reads `statistics` without paging through them.
    x               BLOB NOT NULL,
    y               BLOB NOT NULL,
    UNIQUE (model_id, batch_id)
) STRICT;

INSERT INTO batches_new (seq, model_id, batch_id, content_hash, rows, statistics, status,
                         received_at, folded_at, version, error, x, y)
SELECT seq, model_id, batch_id, content_hash, rows, statistics, status,
       received_at, folded_at, version, error, x, y
FROM batches;

-- A seq is never reused, even one whose batch was deleted with its model.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'batches_new', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'batches_new');
UPDATE sqlite_sequence
SET seq = max(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'batches'), 0))
WHERE name = 'batches_new';

DROP TABLE batches;
ALTER TABLE batches_new RENAME TO batches;

CREATE INDEX batches_queued ON batches (model_id, seq) WHERE status = 'queued';
CREATE INDEX batches_by_version ON batches (model_id, version) WHERE version IS NOT NULL;
CREATE INDEX batches_held ON batches (model_id, seq) WHERE status = 'held';
