# throttled sidecar configuration. Check it with:
#   throttled check-config --config examples/throttled.hcl          (offline)
#   throttled check-config --config examples/throttled.hcl --live   (against the cluster)
# Secrets never need to be inline: use env("NAME") or a *_file attribute.

primary {
  # A role granted pg_monitor (not a superuser): the sampler's.
  dsn   = env("THROTTLED_PRIMARY_DSN")
  # No SQL reveals the core count; primary_load is on-CPU sessions per core.
  cores = 16
  # Holds, the audit log and worker leases live in schema "throttled" of
  # the primary itself; this role must be able to write it (own the schema,
  # or have CREATE on the database). Left out, it is dsn, and the sampler's
  # pg_monitor role may not: check-config --live and run refuse that.
  coordination_dsn = env("THROTTLED_COORDINATION_DSN")
}

# Every replica that paces the jobs. required: missing or stale stops all
# work; optional (the default): its lag binds while it is readable;
# ignored: shown, never acted on. A replica named here that does not exist
# on the primary makes --live (and a reload) refuse the whole file.
replica "replica1" {
  policy = "required"
}

# Signal rules override the defaults (primary_load 0.7 / critical 1.0,
# connection_headroom 10 % free / critical 5 %, replica_lag_seconds 2 s).
signal "primary_load" {
  target   = 0.7
  critical = 1.0
  max_age  = "3s"
}
signal "replica_lag_seconds" {
  target = 5
}

# Jobs: weight shares the budget; min/max rate in batches per second.
# min_batch_size, max_batch_size and target_batch_duration, when set, bound
# the batches of the job's remote workers (they replace the worker's own).
job "purge" {
  weight                = 1
  max_rate              = 20
  target_batch_duration = "1s"
}
job "archive" {
  weight = 2
  # Never inside the maintenance window below; and, with run_windows, only
  # inside one of them (your hours, in your zone):
  avoid = ["weekly-vacuum"]
  # run_windows = ["mon-fri 01:00-06:00 Europe/Istanbul", "sat,sun 00:00-24:00 Europe/Istanbul"]
}

# A maintenance window: the jobs that avoid it pause inside it, in every
# process. A window is [days] HH:MM-HH:MM zone; use your own zone, as an IANA
# name (Europe/Istanbul, America/New_York): a skipped hour does not happen,
# a repeated one happens twice.
maintenance "weekly-vacuum" {
  window = "sun 02:00-05:00 UTC"
}

# A custom signal: one scalar query of your own, run in a READ ONLY
# transaction as the sampler's role. This one reads only the catalog; as a
# job rule, every job pauses while more than one transaction older than 10
# minutes holds the horizon back:
custom_signal "old_transactions" {
  query = "SELECT count(*) FROM pg_stat_activity WHERE xact_start < now() - interval '10 minutes'"
  unit  = "sessions"
  every = "5s"
}
signal "old_transactions" {
  target = 1
}
# One on your own table (the sampler's role needs SELECT on it):
# custom_signal "orders_backlog" {
#   query = "SELECT count(*) FROM orders_queue"
#   unit  = "rows"
# }
# signal "orders_backlog" {
#   target = 10000
# }

# The application's own p99, from Prometheus, as a pacing signal (docs/SIGNALS.md):
# prometheus {
#   address      = "http://127.0.0.1:9090"
#   bearer_token = env("PROM_TOKEN")
# }
# prometheus_signal "api_p99" {
#   query       = "histogram_quantile(0.99, sum(rate(http_request_duration_seconds_bucket{job=\"api\"}[15s])) by (le))"
#   traffic     = "sum(rate(http_request_duration_seconds_count{job=\"api\"}[15s]))"
#   min_traffic = 1
#   unit        = "seconds"
#   delay       = "16s"    # scrape interval (1s here) + the rate() window (15s): how long a job takes to show
# }
# signal "api_p99" {
#   target   = 1.1          # a ratio over the p99 while no job works
#   baseline = "job-free"
#   critical = 2.0
#   max_age  = "30s"
# }

# Every hold expires; longer than max_ttl is refused.
holds {
  default_ttl = "1h"
  max_ttl     = "24h"
}

listen {
  address = "127.0.0.1:18087"
  # tls_cert = "/etc/throttled/tls.crt"
  # tls_key  = "/etc/throttled/tls.key"
  # Reads (status, jobs, holds, check) without a token:
  # open_reads = true
  max_concurrent_requests = 64
}

# Bearer tokens with scopes: read, pause (pause and resume), admin (reload).
token "ops" {
  secret = env("THROTTLED_TOKEN_OPS")
  scopes = ["read", "pause", "admin"]
}
token "viewer" {
  secret_file = "/run/secrets/throttled_viewer"
  scopes      = ["read"]
}

notifier "webhook" {
  url    = "http://127.0.0.1:18099/hook"
  secret = env("THROTTLED_WEBHOOK_SECRET")
}

# Grafana: the Alerting contact point (POST /v1/hooks/grafana) and the
# confirm page the jobs dashboard's Pause… and Resume… links open.
grafana {
  webhook_secret = env("THROTTLED_GRAFANA_SECRET")
  # Only for Grafana versions that sign the body alone, without the
  # X-Grafana-Alerting-Timestamp header; such requests can be replayed:
  # allow_unstamped_signatures = true
  # Behind an SSO proxy that sets the signed-in user (only when every
  # request reaches throttled through that proxy):
  # user_header = "X-WEBAUTH-USER"
  # Where the confirm page may send a person back to; their origins are
  # also the only ones a Grafana action may call POST /v1/holds from:
  return_urls = ["https://grafana.example.com/d/"]
  # Push every hold to Grafana's annotations as a region (closed on
  # release), for dashboards that do not query throttled's metrics:
  # url                   = "https://grafana.example.com"
  # service_account_token = env("THROTTLED_GRAFANA_TOKEN")
}

controller {
  max_budget   = 50
  quiet_period = "30s"
  # Pace on the foreground's latency too (a canary commit timed every 50 ms
  # against its job-free baseline; needs `throttled migrate`). On by default
  # where the canary can run; false turns it off. A signal "foreground_latency"
  # block sets its target (default 1.3).
  # foreground_latency = false
}
