package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// demoTraffic sends a steady mix of requests through the gateway so that a
// fresh `make run` dashboard has something to show: a few well-behaved API
// keys, one noisy key that keeps hitting its limit, an enterprise key and
// some per-address traffic. rps is the total request rate.
//
// The per-address requests come from demoClientIP, not the address a user's
// curl uses, so they never spend the user's per-ip tokens; where that
// address cannot be used (loopback is only 127.0.0.1 on some systems) they
// are left out.
func demoTraffic(ctx context.Context, base string, rps int) {
	if rps <= 0 {
		return
	}
	client := &http.Client{Timeout: 5 * time.Second}
	ipClient := demoAddressClient(base)
	tick := time.NewTicker(time.Second / time.Duration(rps))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		path, c := demoPath(i), client
		if path == demoIPPath {
			if ipClient == nil {
				continue
			}
			c = ipClient
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return
		}
		for name, value := range demoHeaders(i) {
			req.Header.Set(name, value)
		}
		if resp, err := c.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}

// demoHeaders picks the i-th request's identity: every third request is
// the noisy free-tier key, then calm free-tier keys, an enterprise key, and
// anonymous requests to /ip/ (limited per client address).
func demoHeaders(i int) map[string]string {
	switch i % 6 {
	case 0, 3:
		return map[string]string{"x-api-key": "sk_live_noisy_client"}
	case 1:
		return map[string]string{"x-api-key": "sk_live_calm_" + strconv.Itoa(i%5)}
	case 2:
		return map[string]string{"x-api-key": "sk_live_enterprise", "x-plan": "enterprise"}
	default:
		return nil
	}
}

// demoIPPath is the path of the per-address demo requests.
const demoIPPath = "/ip/items"

func demoPath(i int) string {
	if i%6 >= 4 {
		return demoIPPath
	}
	return "/api/items"
}

// demoClientIP is the source address of the per-address demo traffic.
var demoClientIP = net.IPv4(127, 0, 0, 2)

// demoAddressClient returns a client whose connections come from
// demoClientIP, or nil if this system cannot connect to base from there.
func demoAddressClient(base string) *http.Client {
	u, err := url.Parse(base)
	if err != nil {
		return nil
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: demoClientIP}, Timeout: time.Second}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		return nil
	}
	conn.Close()
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}
