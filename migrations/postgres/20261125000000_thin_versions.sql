-- A fold's version keeps its full state only every `database.full_state_every` versions; a fold
-- in between keeps an empty `state` and the SHA-256 of the state it had, and is recomputed by
-- replaying its batches from the last full state before it (checked against the digest). A
-- binary from before this cannot read a thin version: the new migration makes it refuse the
-- database at start-up. Versions written before this have no digest and are never thinned.
ALTER TABLE versions ADD COLUMN state_digest BYTEA
    CHECK (state_digest IS NULL OR octet_length(state_digest) = 32);
COMMENT ON COLUMN versions.state IS
    'The whole model state (estimator codec); empty for a fold kept thin (see state_digest)';
COMMENT ON COLUMN versions.state_digest IS
    'SHA-256 of the encoded state, NULL for versions written before digests were kept';
