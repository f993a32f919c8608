-- A version may also be made by growing the model: outputs or named features appended to its
-- specification, the state widened with their exact zero statistics (origin 'extend'; see
-- migrations/postgres). SQLite cannot change a CHECK constraint in place: the table is rebuilt
-- with every row.
CREATE TABLE versions_new (
    model_id        INTEGER NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    version         INTEGER NOT NULL CHECK (version > 0),
    created_at      TEXT NOT NULL,
    origin          TEXT NOT NULL CHECK (origin IN ('fold', 'restore', 'refit', 'extend')),
    restored_from   INTEGER,
    observations    REAL NOT NULL,
    -- σ² per output, null for an output that is not trained yet (a JSON array).
    noise_variances TEXT NOT NULL CHECK (json_valid(noise_variances)),
    -- The whole model state (estimator codec); empty for a fold kept thin.
    state           BLOB NOT NULL,
    state_digest    BLOB CHECK (state_digest IS NULL OR length(state_digest) = 32),
    PRIMARY KEY (model_id, version)
) STRICT;

INSERT INTO versions_new (model_id, version, created_at, origin, restored_from, observations,
                          noise_variances, state, state_digest)
SELECT model_id, version, created_at, origin, restored_from, observations,
       noise_variances, state, state_digest
FROM versions;

DROP TABLE versions;
ALTER TABLE versions_new RENAME TO versions;
