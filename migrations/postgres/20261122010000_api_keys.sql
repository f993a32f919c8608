-- API keys. The key itself is shown once, when it is created; only its SHA-256 is stored.
-- Keys are 256 random bits, so a fast hash is enough: there is nothing to brute-force.

CREATE TABLE api_keys (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- What the key is for, chosen by the admin who made it (e.g. "mes-line-3").
    name        TEXT NOT NULL,
    -- The first characters of the key, so that people can tell their keys apart.
    prefix      TEXT NOT NULL,
    hash        BYTEA NOT NULL UNIQUE CHECK (length(hash) = 32),
    scopes      TEXT[] NOT NULL
                CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['admin', 'ingest', 'predict']),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at  TIMESTAMPTZ
);
