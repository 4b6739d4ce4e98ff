-- A binding signal is stored as its signal's name and its sample's
-- labels, apart: the leader's decision (binding), each worker's lease
-- (binding) and the critical pause a new leader takes over
-- (critical_signal) hold the name alone, and the labels (the replica, for
-- a per-replica signal) are a JSON object beside it, so nothing that
-- reads one back parses a key such as replica_lag_seconds{replica="r1"}.
ALTER TABLE throttled.leader
    ADD COLUMN binding_labels  jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(binding_labels) = 'object'),
    ADD COLUMN critical_labels jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(critical_labels) = 'object');
ALTER TABLE throttled.workers
    ADD COLUMN binding_labels jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(binding_labels) = 'object');

-- Keys written before this version split once, here: name{k="v",...}.
-- (A throttled older than this one refuses the migrated database, so no
-- key is written after.) A critical pause under way is kept whole: the
-- next leader resumes it on the same replica's signal.
UPDATE throttled.leader SET
    binding_labels = (SELECT coalesce(jsonb_object_agg(m[1], m[2]), '{}')
        FROM regexp_matches(substring(binding FROM '\{(.*)\}$'), '([^=,]+)="([^"]*)"', 'g') AS m),
    binding = split_part(binding, '{', 1),
    critical_labels = (SELECT coalesce(jsonb_object_agg(m[1], m[2]), '{}')
        FROM regexp_matches(substring(critical_signal FROM '\{(.*)\}$'), '([^=,]+)="([^"]*)"', 'g') AS m),
    critical_signal = split_part(critical_signal, '{', 1)
    WHERE binding LIKE '%{%' OR critical_signal LIKE '%{%';
UPDATE throttled.workers SET
    binding_labels = (SELECT coalesce(jsonb_object_agg(m[1], m[2]), '{}')
        FROM regexp_matches(substring(binding FROM '\{(.*)\}$'), '([^=,]+)="([^"]*)"', 'g') AS m),
    binding = split_part(binding, '{', 1)
    WHERE binding LIKE '%{%';
