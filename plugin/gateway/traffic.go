package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"
)

// demoTraffic sends a steady mix of requests through the gateway so that a
// fresh `make run` dashboard has something to show: a few well-behaved API
// keys, one noisy key that keeps hitting its limit, an enterprise key and
// some per-address traffic. rps is the total request rate.
func demoTraffic(ctx context.Context, base string, rps int) {
	if rps <= 0 {
		return
	}
	client := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(time.Second / time.Duration(rps))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+demoPath(i), nil)
		if err != nil {
			return
		}
		for name, value := range demoHeaders(i) {
			req.Header.Set(name, value)
		}
		if resp, err := client.Do(req); err == nil {
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

func demoPath(i int) string {
	if i%6 >= 4 {
		return "/ip/items"
	}
	return "/api/items"
}
