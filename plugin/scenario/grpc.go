package scenario

// gRPC calls: Envoy answers a local reply to a gRPC request (content-type
// application/grpc or application/grpc+...) trailers-only, HTTP 200, with
// the call's status in grpc-status and the body, percent-encoded, in
// grpc-message. A limit rule's rejection carries reject_grpc_status
// (resource_exhausted unless configured); a deny rule's follows gRPC's
// mapping of its HTTP status (403: permission_denied). The RateLimit fields
// and Retry-After travel with it as trailing metadata. Other requests,
// application/grpc-web included, get the HTTP rejection.

import (
	"fmt"
	"net/url"
	"testing"
)

func init() {
	register(Case{Name: "GRPCCallsAreRejectedWithAGRPCStatus", Run: grpcRejections})
}

const grpcConfig = `{%s"policies": [{"name": "p", "rules": [
  {"name": "banned", "action": "deny", "match": {"header:x-api-key": "banned"}},
  {"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]}]}`

func grpcCall(key, contentType string) Request {
	return req(":method", "POST", ":path", "/shop.Cart/Add", "content-type", contentType, "te", "trailers", "x-api-key", key)
}

func grpcRejections(t *testing.T, start Starter) {
	h := startConfig(t, start, fmt.Sprintf(grpcConfig, ""))
	if res := do(t, h, grpcCall("k1", "application/grpc")); res.Rejected {
		t.Fatal("the first call was rejected")
	}
	for _, ct := range []string{"application/grpc", "application/grpc+proto"} {
		res := do(t, h, grpcCall("k1", ct))
		wantRejection(t, ct, res, 200, `{"error":"rate_limited"...`,
			"content-type", "application/grpc", "grpc-status", "8", "content-length", "-",
			"x-ratelimit-reason", "token_bucket_exceeded", "ratelimit-policy", `"api";q=1;w=1000`)
		wantGRPCMessage(t, ct, res)
		for _, name := range []string{"retry-after", "ratelimit", "ratelimit-policy", "grpc-status"} {
			if n := headerCount(res.ResponseHeaders, name); n != 1 {
				t.Errorf("%s: %d %s fields in the trailers: %v", ct, n, name, res.ResponseHeaders)
			}
		}
	}

	// gRPC-Web and plain HTTP get the HTTP rejection.
	for _, r := range []Request{grpcCall("k1", "application/grpc-web"), req("x-api-key", "k1")} {
		wantRejection(t, header(r.Headers, "content-type"), do(t, h, r), 429, `{"error":"rate_limited"...`,
			"content-type", "application/json", "grpc-status", "-", "grpc-message", "-")
	}

	// A deny rule names no gRPC status: Envoy maps its 403.
	res := do(t, h, grpcCall("banned", "application/grpc"))
	wantRejection(t, "a deny rule", res, 200, `{"error":"denied","rule":"banned"}`,
		"content-type", "application/grpc", "grpc-status", "7", "x-ratelimit-reason", "denied")
	wantGRPCMessage(t, "a deny rule", res)
	noRecoveredPanics(t, h)

	// The configured status, and a text body percent-encoded.
	h = startConfig(t, start, fmt.Sprintf(grpcConfig, `"reject_grpc_status": "unavailable", "reject_body": "Slow down: 100% used\n", `))
	do(t, h, grpcCall("k2", "application/grpc"))
	wantRejection(t, "unavailable", do(t, h, grpcCall("k2", "application/grpc")), 200, "Slow down: 100% used\n",
		"content-type", "application/grpc", "grpc-status", "14", "grpc-message", "Slow down: 100%25 used%0A")
	noRecoveredPanics(t, h)
}

// wantGRPCMessage checks that grpc-message is the body the filter sent, as
// gRPC percent-encodes it: printable ASCII but '%', which decodes back.
func wantGRPCMessage(t *testing.T, what string, res Response) {
	t.Helper()
	msg := header(res.ResponseHeaders, "grpc-message")
	for i := 0; i < len(msg); i++ {
		if msg[i] < ' ' || msg[i] >= '~' {
			t.Fatalf("%s: grpc-message %q has byte %#x", what, msg, msg[i])
		}
	}
	if got, err := url.PathUnescape(msg); err != nil || got != string(res.LocalBody) {
		t.Fatalf("%s: grpc-message %q decodes to %q (%v), want the body %q", what, msg, got, err, res.LocalBody)
	}
}
