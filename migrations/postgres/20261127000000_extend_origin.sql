-- A version may also be made by growing the model: outputs or named features appended to its
-- specification, the state widened with their exact zero statistics (origin 'extend'). A
-- binary from before this refuses the database at start-up (an applied migration it does not
-- know), so none meets an origin it cannot read.
ALTER TABLE versions DROP CONSTRAINT versions_origin_check;
ALTER TABLE versions ADD CONSTRAINT versions_origin_check
    CHECK (origin IN ('fold', 'restore', 'refit', 'extend'));
