-- A model may be given a successor instrument (its specification's `successor`). Its versions
-- then keep, in `state`, the model state followed by the successor's (an envelope, magic
-- "MRSV"), never thin; its batches of the successor's readings keep them in `statistics`
-- (magic "MRSB"). A binary from before this would fail to read such a state and could thin a
-- version that carries one: this migration, which it does not know, makes it refuse the
-- database at start-up.
COMMENT ON COLUMN versions.state IS
    'The whole model state (estimator codec), with a successor instrument''s state after it for '
    'a model that has one; empty for a fold kept thin (see state_digest)';
COMMENT ON COLUMN batches.statistics IS
    'The batch''s encoded statistics, or its successor readings (emptied with the raw rows by '
    'retention); empty when kept as its raw rows';
