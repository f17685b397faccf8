package simulate

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
)

func FuzzRequestSpecBuild(f *testing.F) {
	f.Add("GET", "/a?b=c", "example.com", "x-api-key", "v", "10.0.0.1:80", "a.eyJzdWIiOiJ4In0.c", "k", "v", "spiffe://cluster.local/ns/a/sa/b", "checkout", 200, "content-type", "{}", `{"ns":{"k":"v"}}`, "7")
	f.Add("", "", "", "", "", "", "", "", "", "", "", 0, "", "", "", "")
	f.Add("P\x00", "/\n", "a b", "bad name", "\r", "[::1]:99999", "...", "", "", "spiffe://a b", "check\x7fout", 999, "x y", "\x00", `{"ns":[1]}`, "-1")
	f.Add("GET", "/", "", "", "", "", "", "", "", "", "", 200, "", "", `{"ns":{"k":`, "18446744073709551616")
	f.Fuzz(func(t *testing.T, method, path, host, hname, hval, addr, jwt, qk, qv, peer, route string, status int, rname, body, meta, conn string) {
		b := RequestSpec{Method: method, Path: path, Host: host, Headers: map[string]string{hname: hval},
			ClientAddress: addr, JWT: jwt, Query: map[string]string{qk: qv}, PeerPrincipal: peer, Route: route, Metadata: json.RawMessage(meta), Connection: ConnectionSpec(conn),
			Response: &ResponseSpec{Status: status, Headers: map[string]string{rname: body}, Trailers: map[string]string{rname: body}, Body: body}}
		req, err := b.Build()
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("error %q does not name a request field", err)
			}
			return
		}
		if req.Path == "" || req.Path[0] != '/' || req.Method == "" || req.ClientAddress == "" {
			t.Fatalf("accepted %+v", req)
		}
		if req.Connection != "" {
			if n, err := strconv.ParseUint(req.Connection, 10, 64); err != nil || strconv.FormatUint(n, 10) != req.Connection {
				t.Fatalf("accepted the connection %q, not a number in decimal", req.Connection)
			}
		}
	})
}
