-- Each worker's lease carries its reason code (throttle.Code) beside the
-- reason's text, so the freno check, the metrics and the CLI read why a
-- worker runs as it does from the code, never by parsing the text. A row
-- an older leader wrote has '' and is read by its state.
ALTER TABLE throttled.workers ADD COLUMN code text NOT NULL DEFAULT '';
