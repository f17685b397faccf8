package wasmhost

import (
	"slices"
	"testing"
)

func TestOnlyGRPCContentTypesWithAPathAreGRPCRequests(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "application/grpc+json": true,
		"application/grpc-web": false, "application/grpc-web+proto": false, "application/grpcx": false,
		"application/json": false, "": false, "Application/grpc": false,
	} {
		req := []Header{{":method", "POST"}, {":path", "/svc/M"}, {"content-type", ct}}
		if got := isGRPCRequest(req); got != want {
			t.Errorf("content-type %q: gRPC %v, want %v", ct, got, want)
		}
	}
	if isGRPCRequest([]Header{{":method", "POST"}, {"content-type", "application/grpc"}}) {
		t.Error("a request without :path is gRPC")
	}
}

func TestGRPCRepliesAreTrailersOnlyAsEnvoySendsThem(t *testing.T) {
	for _, c := range []struct {
		name  string
		local LocalResponse
		want  []Header
	}{
		{"the plugin's status; its content type replaced",
			LocalResponse{Status: 429, GRPCStatus: 8, Body: []byte("{\"a\":\"100%\"}\n"),
				Headers: []Header{{"retry-after", "3"}, {"content-type", "application/json"}}},
			[]Header{{":status", "200"}, {"retry-after", "3"}, {"content-type", "application/grpc"},
				{"grpc-status", "8"}, {"grpc-message", "{\"a\":\"100%25\"}%0A"}}},
		{"no status: the HTTP status mapped; no body, no message",
			LocalResponse{Status: 403, GRPCStatus: -1},
			[]Header{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "7"}}},
		{"an unknown code is no status",
			LocalResponse{Status: 503, GRPCStatus: 17},
			[]Header{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "14"}}},
		{"the plugin's own grpc-status stays; bytes outside ASCII and ~ encoded",
			LocalResponse{Status: 429, GRPCStatus: 8, Body: []byte("caf\xc3\xa9~"), Headers: []Header{{"grpc-status", "4"}}},
			[]Header{{":status", "200"}, {"grpc-status", "4"}, {"content-type", "application/grpc"}, {"grpc-message", "caf%C3%A9%7E"}}},
	} {
		c.local.GRPC = true
		if got := localReplyHeaders(&c.local); !slices.Equal(got, c.want) {
			t.Errorf("%s:\ngot  %v\nwant %v", c.name, got, c.want)
		}
	}
}
