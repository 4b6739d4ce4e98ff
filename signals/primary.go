package signals

import (
	"fmt"
	"time"
)

// primarySQL identifies the server a primary connection reached: its
// address as it sees it, and the timeline of the WAL it writes. A
// promotion starts a new timeline, so a failover changes the identity
// even behind one address (a proxy, a virtual IP).
const primarySQL = `SELECT COALESCE(host(inet_server_addr()) || ':' || inet_server_port(), ''),
  ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int`

// Primary is the server a [Poller] samples as the primary, as it found it
// at connect.
type Primary struct {
	// Addr is the server's host:port as it reports it; "" over a Unix
	// socket.
	Addr string
	// Timeline is the timeline of the WAL it writes.
	Timeline int
	// Since is when the Poller first sampled it.
	Since time.Time
	// Checked is when a tick last succeeded on it: a Poller that stopped
	// (a follower's, in coordinated mode) keeps an old one.
	Checked time.Time
}

// String names the primary for logs and the audit log.
func (p Primary) String() string {
	return fmt.Sprintf("%s (timeline %d)", p.Addr, p.Timeline)
}

// Same reports whether p and q are one server on one timeline, whenever
// each was sampled.
func (p Primary) Same(q Primary) bool { return p.Addr == q.Addr && p.Timeline == q.Timeline }

// observe records that the primary connection reached id at now, and
// reports the primary it replaced (ok false when it is the same one, or
// the first). A changed primary is a changed map: the replicas the old
// one streamed to are no inventory of the new one's, so the names seen
// there are forgotten, and the new primary's slots and walsenders (and
// the configured names) say which replicas exist now. A replica that
// followed the old primary and does not stream from the new one reads as
// missing only while a slot, a replica DSN or the configuration names it;
// it never keeps a reading of its lag from before.
func (s *primarySampler) observe(id Primary, now time.Time) (old Primary, ok bool) {
	if s.cur.Since.IsZero() {
		id.Since = now
		s.cur = id
		return Primary{}, false
	}
	if s.cur.Same(id) {
		return Primary{}, false
	}
	old = s.cur
	id.Since = now
	s.cur = id
	clear(s.seen)
	return old, true
}
