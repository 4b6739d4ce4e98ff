-- The cluster's settings, one row. max_hold_ttl caps every hold's life:
-- `throttled run` writes it from its holds.max_ttl, and the database, not
-- the client, enforces it, so no client's flag or library option can raise
-- it (a client's own maximum can only be lower).
CREATE TABLE throttled.settings (
    id           int PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    max_hold_ttl interval NOT NULL DEFAULT '24 hours' CHECK (max_hold_ttl > interval '0')
);
INSERT INTO throttled.settings DEFAULT VALUES;

CREATE FUNCTION throttled.settings_keep_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'throttled.settings keeps its one row; UPDATE it instead';
END $$;
CREATE TRIGGER settings_no_delete BEFORE DELETE ON throttled.settings
    FOR EACH ROW EXECUTE FUNCTION throttled.settings_keep_row();
CREATE TRIGGER settings_no_truncate BEFORE TRUNCATE ON throttled.settings
    FOR EACH STATEMENT EXECUTE FUNCTION throttled.settings_keep_row();

-- Every change of the cap is audited, whoever makes it: the actor, source
-- and reason come from the transaction's throttled.actor, throttled.source
-- and throttled.reason settings (holds.Store.SetMaxTTL sets them), else
-- the session's role.
CREATE FUNCTION throttled.audit_settings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.max_hold_ttl IS DISTINCT FROM OLD.max_hold_ttl THEN
        INSERT INTO throttled.audit (event, actor, source, reason, detail) VALUES (
            'hold_max_ttl',
            COALESCE(NULLIF(current_setting('throttled.actor', true), ''), session_user),
            COALESCE(NULLIF(current_setting('throttled.source', true), ''), 'sql'),
            COALESCE(NULLIF(current_setting('throttled.reason', true), ''), 'throttled.settings updated'),
            jsonb_build_object('old', OLD.max_hold_ttl::text, 'new', NEW.max_hold_ttl::text,
                'old_seconds', extract(epoch FROM OLD.max_hold_ttl), 'new_seconds', extract(epoch FROM NEW.max_hold_ttl)));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER settings_audit AFTER UPDATE ON throttled.settings
    FOR EACH ROW EXECUTE FUNCTION throttled.audit_settings();

-- A hold may not expire more than max_hold_ttl (plus 5 s for the
-- statement) past the transaction's now(): checked on every insert and on
-- every renewal that moves expires_at later. Shortening is always allowed.
-- SQLSTATE TH001 is this refusal; holds.Store reports it as invalid.
CREATE FUNCTION throttled.holds_max_ttl() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cap interval := COALESCE((SELECT max_hold_ttl FROM throttled.settings WHERE id = 1), interval '24 hours');
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.expires_at <= OLD.expires_at THEN
        RETURN NEW;
    END IF;
    IF NEW.expires_at > now() + cap + interval '5 seconds' THEN
        RAISE EXCEPTION USING ERRCODE = 'TH001',
            MESSAGE = format('hold expires %s from now, past the cluster''s maximum hold TTL %s',
                NEW.expires_at - now(), cap),
            HINT = 'the maximum is throttled.settings.max_hold_ttl, written by throttled run from holds.max_ttl';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER holds_max_ttl BEFORE INSERT OR UPDATE OF expires_at ON throttled.holds
    FOR EACH ROW EXECUTE FUNCTION throttled.holds_max_ttl();
