-- A hold may exempt its jobs from one signal instead of pausing them:
-- exempt names the signal (a rule's name, such as replica_lag_seconds);
-- '' (every earlier hold) is no exemption. A hold exempts or scales, not
-- both.
ALTER TABLE throttled.holds ADD COLUMN exempt text NOT NULL DEFAULT ''
    CHECK (exempt ~ '^([a-z][a-z0-9_]{0,62})?$'),
    ADD CONSTRAINT holds_exempt_or_ratio CHECK (exempt = '' OR ratio = 0);
