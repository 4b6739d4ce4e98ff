-- Holds made by an external system (a Grafana alert), keyed by its own
-- identity (the alert's fingerprint): a duplicate delivery finds the hold
-- already there, and a resolve releases exactly that one.
ALTER TABLE throttled.holds ADD COLUMN external_key text;
CREATE UNIQUE INDEX holds_external_active ON throttled.holds (external_key)
    WHERE released_at IS NULL AND external_key IS NOT NULL;

-- The last resolve of each external key, so a firing delivered after its
-- own resolve (out of order) does not pause anything.
CREATE TABLE throttled.external_resolved (
    external_key text PRIMARY KEY,
    ends_at      timestamptz NOT NULL,
    resolved_at  timestamptz NOT NULL DEFAULT now()
);
