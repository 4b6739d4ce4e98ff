-- Reading throttled's state needs no write: the CLI's read-only commands
-- (holds, audit, status) and dashboards may use the sampler's pg_monitor
-- role. Holds, the audit log, leases and the leader's publication hold
-- reasons and names, never secrets.
GRANT USAGE ON SCHEMA throttled TO pg_monitor;
GRANT SELECT ON throttled.schema_migrations, throttled.holds, throttled.audit, throttled.workers, throttled.leader,
    throttled.settings, throttled.windows, throttled.checkpoints TO pg_monitor;
