-- A model may be given a successor instrument: see migrations/postgres. Nothing in the schema
-- changes (SQLite keeps no column comments); a binary from before this refuses the database at
-- start-up because it does not know this migration, so none meets a state it cannot read.
SELECT 1;
