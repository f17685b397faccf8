package scenario

// response_bytes: a budget of bytes per key, charged the size of each
// response's body as it passes (a download or export quota, a stream of
// any length): counted chunk by chunk without reading the body, charged
// when it ends. A response without a body costs nothing; a stream reset
// midway is charged the bytes that passed.

import (
	"strings"
	"testing"
)

func init() {
	register(Case{Name: "ResponseBytesChargeTheBodysSize", Run: responseBytes})
}

const bytesConfig = `{"rules": [{"name": "egress", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"tokens_per_second": 0.000001, "burst": 10000, "cost_source": "response_bytes"}}]}`

// download is a request of key k answered with chunks of the given sizes.
func download(k string, sizes ...int) Request {
	r := req(":path", "/export", "x-api-key", k)
	r.ResponseHeaders = []Header{{":status", "200"}, {"content-type", "application/octet-stream"}}
	for _, n := range sizes {
		r.ResponseBody = append(r.ResponseBody, []byte(strings.Repeat("x", n)))
	}
	return r
}

func responseBytes(t *testing.T, start Starter) {
	h := startConfig(t, start, bytesConfig)
	refused := func(what string, r Request) {
		t.Helper()
		wantRejection(t, what, do(t, h, r), 429, `{"error":"rate_limited","rule":"egress"...`)
	}
	// The RateLimit field is the budget before the body's charge, which
	// comes once the body has passed.
	admittedLeaving(t, h, "k's first download, 9,000 bytes", download("k", 3000, 3000, 3000), "10000")
	admittedLeaving(t, h, "k's second, 4,000 bytes", download("k", 2000, 2000), "1000")
	refused("k, 3,000 bytes in debt", download("k", 10))

	// No body: nothing charged (default_cost is not).
	admittedLeaving(t, h, "k2's answer without a body", download("k2"), "10000")
	admittedLeaving(t, h, "k2's 10,000 bytes", download("k2", 5000, 5000), "10000")
	refused("k2, its budget spent", download("k2", 10))

	// A stream reset after its first chunk is charged that chunk.
	reset := download("k3", 6000, 6000)
	reset.ResetAfterBodyChunks = 1
	do(t, h, reset)
	admittedLeaving(t, h, "k3 after 6,000 bytes of a reset download", download("k3", 4001), "4000")
	refused("k3, a byte in debt", download("k3", 10))
	if n := metric(h, "sluice.rule.egress.response_cost_default"); n != 0 {
		t.Errorf("response_cost_default = %d: a body's size is never a default", n)
	}
	noRecoveredPanics(t, h)
}
