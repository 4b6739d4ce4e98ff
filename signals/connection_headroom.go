package signals

import "time"

// headroomSQL reads the connection limits and the client backends using
// them. Walsenders, autovacuum and background workers do not take client
// slots. reserved_connections exists from PostgreSQL 16 on.
const headroomSQL = `SELECT
  current_setting('max_connections')::int,
  current_setting('superuser_reserved_connections')::int,
  COALESCE(NULLIF(current_setting('reserved_connections', true), '')::int, 0),
  (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`

// headroom is one row of headroomSQL.
type headroom struct {
	maxConns, superuserReserved, reserved, clients int64
}

// samples turns one reading into connection_headroom (free client slots,
// clamped at 0) and connection_used_fraction (clients over usable slots,
// which may exceed 1 when superusers use their reserved slots).
func (h headroom) samples(at time.Time) []Sample {
	usable := h.maxConns - h.superuserReserved - h.reserved
	free := max(usable-h.clients, 0)
	var used float64
	if usable > 0 {
		used = float64(h.clients) / float64(usable)
	} else {
		used = 1
	}
	return []Sample{
		{Name: ConnectionHeadroom, Value: float64(free), Raw: float64(free), Unit: UnitConnections, At: at},
		{Name: ConnectionUsedFraction, Value: used, Raw: used, Unit: UnitRatio, At: at},
	}
}

func headroomFailed(at time.Time, err error) []Sample {
	return []Sample{
		failed(ConnectionHeadroom, nil, UnitConnections, at, err),
		failed(ConnectionUsedFraction, nil, UnitRatio, at, err),
	}
}
