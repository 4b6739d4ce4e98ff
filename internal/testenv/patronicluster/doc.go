// Package patronicluster starts a throwaway Patroni cluster for the
// failover tests: one etcd and two or three Patroni nodes, each with its
// own data directory, REST API port and PostgreSQL port, all on loopback,
// using the Debian packages patroni and etcd-server (scripts/ensure-patroni)
// and the PostgreSQL binaries internal/testenv/pgcluster finds. When the calling
// process is root, every process runs as the account pgcluster's servers
// run as (PostgreSQL refuses root).
//
// Its helpers drive the events throttled must survive: a switchover
// (Patroni's POST /switchover) and a failover (kill -9 of the leader's
// postmaster; the nodes run with primary_start_timeout 0, so Patroni fails
// over instead of restarting the crashed primary in place). Leader and
// Members read Patroni's REST API; MultiHostDSN lists every node in one
// libpq multi-host URL with the target_session_attrs asked for, which is
// how throttled's DSNs find the primary.
//
// Every wait polls with a deadline; Stop (registered with t.Cleanup by the
// tests) stops Patroni, which stops its postgres, then etcd, and removes
// the directory.
package patronicluster
