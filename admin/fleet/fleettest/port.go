package fleettest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a server the test starts later, often in another process.
//
// The port is chosen below the kernel's ephemeral range. A port from that
// range (what listening on port 0 gives) can be taken between this check
// and the server's bind by any outgoing connection on the machine, as its
// local port, and tests running in parallel make many. Below the range
// only another listener can take it. A port is never handed out twice by
// one test process.
func FreePort(tb testing.TB) int {
	tb.Helper()
	low := ephemeralLow()
	const floor = 10000
	if low-floor < 1000 {
		return anyFreePort(tb)
	}
	ports.Lock()
	defer ports.Unlock()
	for range 200 {
		p := floor + rand.IntN(low-floor)
		if ports.given[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		ports.given[p] = true
		return p
	}
	return anyFreePort(tb)
}

var ports = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux),
// or 32768, the usual one, where the range cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return low
}

// anyFreePort asks the kernel for a free port: the fallback where no port
// below the ephemeral range is free.
func anyFreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
