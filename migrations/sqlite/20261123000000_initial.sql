-- The embedded store: the same tables as PostgreSQL's (migrations/postgres), in SQLite's types.
-- Times are RFC 3339 text in UTC; JSON is text; raw rows and encoded states are blobs.
-- STRICT tables refuse a value of the wrong type instead of storing it anyway.

CREATE TABLE models (
    -- AUTOINCREMENT: an id is never reused, so a deleted model's id cannot name a new one.
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT NOT NULL UNIQUE,
    -- The validated model specification as the API shows it (JSON).
    spec            TEXT NOT NULL CHECK (json_valid(spec)),
    -- Rows that must be queued before the first fit (Algorithm 2) runs.
    first_fit_rows  INTEGER NOT NULL CHECK (first_fit_rows > 0),
    -- The version predictions are served from; 0 while the model has not been trained.
    version         INTEGER NOT NULL DEFAULT 0,
    observations    REAL NOT NULL DEFAULT 0,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
) STRICT;

CREATE TABLE batches (
    -- Arrival order: one writer at a time, and AUTOINCREMENT never reuses a number, so within
    -- a model the order of `seq` is the order in which batches were committed.
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    model_id        INTEGER NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    batch_id        TEXT NOT NULL,
    -- SHA-256 of the batch's content, to tell a retry from a conflicting re-use of its id.
    content_hash    BLOB NOT NULL,
    rows            INTEGER NOT NULL CHECK (rows > 0),
    -- The batch's sufficient statistics (estimator codec), computed when it arrived.
    statistics      BLOB NOT NULL,
    status          TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'folded', 'rejected')),
    received_at     TEXT NOT NULL,
    folded_at       TEXT,
    version         INTEGER,
    error           TEXT,
    -- Raw rows (little-endian f64, row-major), kept for audit and replay. Last, because SQLite
    -- reads a row's columns in order: the folder reads `statistics` without paging through
    -- the raw rows' overflow pages.
    x               BLOB NOT NULL,
    y               BLOB NOT NULL,
    UNIQUE (model_id, batch_id)
) STRICT;

CREATE INDEX batches_queued ON batches (model_id, seq) WHERE status = 'queued';
CREATE INDEX batches_by_version ON batches (model_id, version) WHERE version IS NOT NULL;

CREATE TABLE versions (
    model_id        INTEGER NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    version         INTEGER NOT NULL CHECK (version > 0),
    created_at      TEXT NOT NULL,
    origin          TEXT NOT NULL CHECK (origin IN ('fold', 'restore', 'refit')),
    restored_from   INTEGER,
    observations    REAL NOT NULL,
    -- σ² per output, null for an output that is not trained yet (a JSON array).
    noise_variances TEXT NOT NULL CHECK (json_valid(noise_variances)),
    -- The whole model state (estimator codec).
    state           BLOB NOT NULL,
    PRIMARY KEY (model_id, version)
) STRICT;

-- API keys: only the key's SHA-256 is stored (see migrations/postgres).
CREATE TABLE api_keys (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    prefix      TEXT NOT NULL,
    hash        BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),
    -- A JSON array of scopes.
    scopes      TEXT NOT NULL CHECK (json_valid(scopes) AND json_array_length(scopes) > 0),
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
) STRICT;
