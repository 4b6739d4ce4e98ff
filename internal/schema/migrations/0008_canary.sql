-- The foreground-latency canary (signals.ForegroundLatency): when that
-- signal is on, the sampler commits a one-row UPDATE here every tick, with
-- synchronous_commit on, and times it. The commit waits on WAL flush (and
-- on a synchronous standby, where there is one) like any foreground commit,
-- so its latency is what a write-heavy background job makes every
-- foreground commit wait. Sixteen slots, each taken with SKIP LOCKED, so
-- several samplers never wait on each other's row lock; a canary that
-- finds no free slot fails (it could not time a commit), it never reads
-- as fast.
CREATE TABLE throttled.canary (
    slot    int PRIMARY KEY CHECK (slot BETWEEN 1 AND 16),
    beats   bigint NOT NULL DEFAULT 0,
    beat_at timestamptz
) WITH (fillfactor = 50);
INSERT INTO throttled.canary (slot) SELECT generate_series(1, 16);

-- The sampler samples as a pg_monitor member and is otherwise read-only;
-- this table is the one thing it writes. Granting to pg_monitor, not to a
-- role this migration cannot know, lets any sampler role use it; the worst
-- another pg_monitor member can do here is hold every slot, which fails
-- the signal (closed), never hides load.
GRANT USAGE ON SCHEMA throttled TO pg_monitor;
GRANT SELECT, UPDATE ON throttled.canary TO pg_monitor;
