-- The cluster's default hold life, beside its cap: `throttled run` writes
-- both from its holds block (default_ttl, max_ttl), and a hold whose
-- request gives no TTL (the CLI without --ttl, a library store without a
-- default of its own) lives this long, so the sidecar's file is the one
-- authority for every client. It starts at 1 hour, or the cap if that is
-- shorter, and is never over the cap.
ALTER TABLE throttled.settings ADD COLUMN default_hold_ttl interval;
UPDATE throttled.settings SET default_hold_ttl = LEAST(interval '1 hour', max_hold_ttl);
ALTER TABLE throttled.settings ALTER COLUMN default_hold_ttl SET NOT NULL,
    ALTER COLUMN default_hold_ttl SET DEFAULT interval '1 hour',
    ADD CONSTRAINT settings_default_hold_ttl CHECK (default_hold_ttl > interval '0' AND default_hold_ttl <= max_hold_ttl);

-- Every change of the default is audited as the cap's is.
CREATE OR REPLACE FUNCTION throttled.audit_settings() RETURNS trigger LANGUAGE plpgsql AS $$
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
    IF NEW.default_hold_ttl IS DISTINCT FROM OLD.default_hold_ttl THEN
        INSERT INTO throttled.audit (event, actor, source, reason, detail) VALUES (
            'hold_default_ttl',
            COALESCE(NULLIF(current_setting('throttled.actor', true), ''), session_user),
            COALESCE(NULLIF(current_setting('throttled.source', true), ''), 'sql'),
            COALESCE(NULLIF(current_setting('throttled.reason', true), ''), 'throttled.settings updated'),
            jsonb_build_object('old', OLD.default_hold_ttl::text, 'new', NEW.default_hold_ttl::text,
                'old_seconds', extract(epoch FROM OLD.default_hold_ttl), 'new_seconds', extract(epoch FROM NEW.default_hold_ttl)));
    END IF;
    RETURN NULL;
END $$;
