-- A batch's raw rows move to a table of their own. SQLite writes a whole record again, its
-- overflow pages included, on an UPDATE that changes the record's size: recording a batch's
-- surprise and marking it folded each wrote its raw rows to the log again (280 kB for a batch
-- of 1,000 rows of 35 columns), and held the one writer while doing so. Apart, those updates
-- write a small record, and the rows are written once. A binary from before this refuses the
-- database at start-up (an applied migration it does not know).
CREATE TABLE batch_rows (
    seq     INTEGER PRIMARY KEY REFERENCES batches (seq) ON DELETE CASCADE,
    -- Little-endian f64, row-major; empty once purged (`rows_purged_at` on the batch).
    x       BLOB NOT NULL,
    y       BLOB NOT NULL
) STRICT;

INSERT INTO batch_rows (seq, x, y) SELECT seq, x, y FROM batches;

ALTER TABLE batches DROP COLUMN x;
ALTER TABLE batches DROP COLUMN y;
