-- An ended token's row is kept an hour past its expiry (the sidecar's
-- grantKept), so a report however late in that hour is told how its
-- token ended (409 reported, 410 expired), not 404. The rows past it are
-- removed at each grant, by this index rather than a scan of the table.
CREATE INDEX grants_expires ON throttled.grants (expires_at);
