-- A hold may scale its jobs instead of pausing them (a live override, as
-- freno's and Vitess's throttle ratio): ratio above 0 runs them at that
-- share of the rate they would get; 0, every earlier hold, pauses.
ALTER TABLE throttled.holds ADD COLUMN ratio float8 NOT NULL DEFAULT 0
    CHECK (ratio >= 0 AND ratio <= 1);
