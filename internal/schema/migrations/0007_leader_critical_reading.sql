-- The reading that began the published critical pause and the level it
-- reached, so the next leader names them when it takes the pause over,
-- and when its signals went quiet, so the quiet period counts on. NULL
-- means unknown (published by an older leader, or not quiet).
ALTER TABLE throttled.leader
    ADD COLUMN critical_value       float8,
    ADD COLUMN critical_threshold   float8,
    ADD COLUMN critical_quiet_since timestamptz;
