-- Each worker's lease carries its reason code (throttle.Code) beside the
-- reason's text, so the freno check, the metrics and the CLI read why a
-- worker runs as it does from the code, never by parsing the text. An
-- older leader does not write it: a row it wrote keeps '' or an earlier
-- leader's code, and workers read a code that does not fit the state by
-- the state (throttle.CodeFor).
ALTER TABLE throttled.workers ADD COLUMN code text NOT NULL DEFAULT '';
