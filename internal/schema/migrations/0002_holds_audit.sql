-- Holds: every pause is one row, with a scope, a source, a reason, an actor
-- and an expiry, always. Work may run only while no unexpired, unreleased
-- hold applies to it.
CREATE TABLE throttled.holds (
    id          bigserial PRIMARY KEY,
    scope_kind  text NOT NULL CHECK (scope_kind IN ('all', 'job', 'group')),
    scope_value text NOT NULL DEFAULT '',
    source      text NOT NULL CHECK (source IN ('manual', 'auto', 'grafana-alert', 'cli')),
    reason      text NOT NULL CHECK (btrim(reason) <> ''),
    actor       text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    released_at timestamptz,
    released_by text,
    expiry_audited boolean NOT NULL DEFAULT false,
    CHECK (expires_at > created_at),
    CHECK ((scope_kind = 'all') = (scope_value = ''))
);
CREATE INDEX holds_active ON throttled.holds (expires_at) WHERE released_at IS NULL;

-- Every change to holds wakes every process within the second.
CREATE FUNCTION throttled.notify_holds() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('throttled_holds', COALESCE(NEW.id, OLD.id)::text);
    RETURN NULL;
END $$;
CREATE TRIGGER holds_notify AFTER INSERT OR UPDATE OR DELETE ON throttled.holds
    FOR EACH ROW EXECUTE FUNCTION throttled.notify_holds();

-- The audit log: holds created, released and expired, mode changes,
-- reloads, pauses not honoured. Append-only.
CREATE TABLE throttled.audit (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    event   text NOT NULL,
    actor   text NOT NULL DEFAULT '',
    source  text NOT NULL DEFAULT '',
    reason  text NOT NULL DEFAULT '',
    hold_id bigint,
    detail  jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_at ON throttled.audit (at);
CREATE FUNCTION throttled.audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'throttled.audit is append-only';
END $$;
CREATE TRIGGER audit_no_update BEFORE UPDATE OR DELETE ON throttled.audit
    FOR EACH ROW EXECUTE FUNCTION throttled.audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON throttled.audit
    FOR EACH STATEMENT EXECUTE FUNCTION throttled.audit_append_only();
