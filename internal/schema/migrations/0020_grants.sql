-- Tokens a sidecar has handed to remote workers, until reported or
-- expired. Each holds an in-flight slot of its job; kept here, not only
-- in the sidecar's memory, so a sidecar restarted with tokens out (a
-- deploy, a crash) takes their slots again before it serves a new one,
-- accepts and counts their reports, and refuses a report after the
-- token's expiry as expired. owner is the sidecar that granted it (its
-- host and listen address), so a restarted one knows its own.
CREATE TABLE throttled.grants (
    id         text PRIMARY KEY,
    job        text NOT NULL,
    owner      text NOT NULL,
    worker     text NOT NULL,
    max_batch  int NOT NULL DEFAULT 0,
    granted_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    -- ended is NULL while the token is out, then 'reported' or 'expired';
    -- an ended row is kept a while so a late report is told which.
    ended      text CHECK (ended IN ('reported', 'expired')),
    ended_at   timestamptz
);
CREATE INDEX grants_open ON throttled.grants (owner, job) WHERE ended IS NULL;
GRANT SELECT ON throttled.grants TO pg_monitor;
