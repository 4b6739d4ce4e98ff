-- The leader publishes the critical pause it is in, so the next leader
-- takes it over (latched if it was) instead of resuming work; a person's
-- request to resume a latched pause waits here for the leader to act on.
ALTER TABLE throttled.leader
    ADD COLUMN critical_signal     text NOT NULL DEFAULT '',
    ADD COLUMN critical_since      timestamptz,
    ADD COLUMN latched             boolean NOT NULL DEFAULT false,
    ADD COLUMN pause_budget        float8 NOT NULL DEFAULT 0,
    ADD COLUMN resume_requested_at timestamptz,
    ADD COLUMN resume_by           text;
