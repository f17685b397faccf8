package fleettest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortIsBelowTheEphemeralRangeAndNeverRepeats: outgoing
// connections cannot take the ports handed out, and two calls never get
// the same one.
func TestFreePortIsBelowTheEphemeralRangeAndNeverRepeats(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if low > 11000 && p >= low {
			t.Errorf("port %d is in the ephemeral range (from %d)", p, low)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}
