-- Drift and bad-batch detection: each batch's surprise to the posterior it met when folded,
-- and batches held for review when it exceeds their model's threshold.

-- z per output (NULL for an output not trained then); NULL until computed, and for batches of
-- the first fit.
ALTER TABLE batches ADD COLUMN surprise DOUBLE PRECISION[];
-- Released by an admin after a hold: folded whatever its surprise.
ALTER TABLE batches ADD COLUMN released BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE batches DROP CONSTRAINT batches_status_check;
ALTER TABLE batches ADD CONSTRAINT batches_status_check
    CHECK (status IN ('queued', 'folded', 'rejected', 'held'));
CREATE INDEX batches_held ON batches (model_id, seq) WHERE status = 'held';
