package pgcluster

import (
	"net"
	"strconv"
	"testing"
)

// The pair's ports come from under the kernel's ephemeral range, where no
// outgoing connection takes them between their choice and the server's
// start, and are distinct and free.
func TestFreePortsAreBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	ports, err := freePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < portFloor || p >= low || seen[p] {
			t.Fatalf("ports %v: want distinct ports in [%d, %d)", ports, portFloor, low)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}
