-- Models, their queue of observation batches, and the immutable versions folded from it.

CREATE TABLE models (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    -- The validated model specification as the API shows it (features, outputs, basis, update).
    spec            JSONB NOT NULL,
    -- Rows that must be queued before the first fit (Algorithm 2) runs.
    first_fit_rows  BIGINT NOT NULL CHECK (first_fit_rows > 0),
    -- The version predictions are served from; 0 while the model has not been trained.
    version         BIGINT NOT NULL DEFAULT 0,
    observations    DOUBLE PRECISION NOT NULL DEFAULT 0,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE batches (
    -- Arrival order: ingestion takes a per-model lock before inserting, so within a model the
    -- order of `seq` is the order in which batches were committed.
    seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_id        BIGINT NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    batch_id        TEXT NOT NULL,
    -- SHA-256 of the batch's content, to tell a retry from a conflicting re-use of its id.
    content_hash    BYTEA NOT NULL,
    rows            INTEGER NOT NULL CHECK (rows > 0),
    -- Raw rows (little-endian f64, row-major), kept for audit and replay.
    x               BYTEA NOT NULL,
    y               BYTEA NOT NULL,
    -- The batch's sufficient statistics (estimator codec), computed when it arrived.
    statistics      BYTEA NOT NULL,
    status          TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'folded', 'rejected')),
    received_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    folded_at       TIMESTAMPTZ,
    version         BIGINT,
    error           TEXT,
    UNIQUE (model_id, batch_id)
);

CREATE INDEX batches_queued ON batches (model_id, seq) WHERE status = 'queued';
CREATE INDEX batches_by_version ON batches (model_id, version) WHERE version IS NOT NULL;

CREATE TABLE versions (
    model_id        BIGINT NOT NULL REFERENCES models (id) ON DELETE CASCADE,
    version         BIGINT NOT NULL CHECK (version > 0),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- 'fold', 'restore' or 'refit'
    origin          TEXT NOT NULL CHECK (origin IN ('fold', 'restore', 'refit')),
    restored_from   BIGINT,
    observations    DOUBLE PRECISION NOT NULL,
    -- σ² per output, NULL for an output that is not trained yet.
    noise_variances DOUBLE PRECISION[] NOT NULL,
    -- The whole model state (estimator codec).
    state           BYTEA NOT NULL,
    PRIMARY KEY (model_id, version)
);
