package policy

import (
	"strconv"
	"strings"
)

// This file parses "reject_grpc_status": the gRPC status a gRPC client
// receives when a limit rule rejects its call. Envoy answers a gRPC request
// (content-type application/grpc) with a trailers-only response: HTTP 200,
// the status in grpc-status, the body in grpc-message. Left to Envoy, a 429
// becomes UNAVAILABLE, which gRPC clients commonly retry at once;
// RESOURCE_EXHAUSTED is the status gRPC defines for an exhausted quota.

// DefaultRejectGRPCStatus is RESOURCE_EXHAUSTED.
const DefaultRejectGRPCStatus = 8

// grpcCodes are gRPC's status codes by number, in the lower-case spelling
// of the configuration. OK (0) is not a rejection.
var grpcCodes = [...]string{
	1: "cancelled", 2: "unknown", 3: "invalid_argument", 4: "deadline_exceeded",
	5: "not_found", 6: "already_exists", 7: "permission_denied", 8: "resource_exhausted",
	9: "failed_precondition", 10: "aborted", 11: "out_of_range", 12: "unimplemented",
	13: "internal", 14: "unavailable", 15: "data_loss", 16: "unauthenticated",
}

// GRPCCodeName is the configuration's name of gRPC status code c, or its
// number for a code without one.
func GRPCCodeName(c int) string {
	if c > 0 && c < len(grpcCodes) {
		return grpcCodes[c]
	}
	return strconv.Itoa(c)
}

// GRPCStatusOfHTTP is the gRPC status Envoy sends a gRPC client for a local
// reply of HTTP status code, when the filter names none (a deny rule's
// deny_status): gRPC's HTTP-to-gRPC mapping, as Envoy's
// Grpc::Utility::httpToGrpcStatus applies it.
func GRPCStatusOfHTTP(code int) int {
	switch code {
	case 400:
		return 13 // internal
	case 401:
		return 16 // unauthenticated
	case 403:
		return 7 // permission_denied
	case 404:
		return 12 // unimplemented
	case 429, 502, 503, 504:
		return 14 // unavailable
	}
	return 2 // unknown
}

// grpcStatus reads a gRPC status code name.
func (p *parser) grpcStatus(path string, v *jvalue) (int, bool) {
	names := grpcCodes[1:]
	if v.kind == jString {
		for i, n := range names {
			if v.s == n {
				return i + 1, true
			}
		}
		msg := "unknown gRPC status " + quoteShort(v.s)
		if s := suggest(v.s, names); s != "" {
			msg += " (did you mean " + strconv.Quote(s) + "?)"
		}
		p.errorf(path, msg, `; use a gRPC status name in lower case, such as "resource_exhausted" (the default) or "unavailable" (Envoy's own choice for a 429)`)
		return 0, false
	}
	p.errorf(path, `must be a gRPC status name such as "resource_exhausted", got `, v.kind.String())
	return 0, false
}

// GRPCCodeSet is a set of gRPC status codes (0 to 16), bit c for code c:
// the codes a "response_grpc_status:<codes>" cost source counts.
type GRPCCodeSet uint32

// Has reports whether code is in the set.
func (s GRPCCodeSet) Has(code int) bool {
	return code >= 0 && code < len(grpcCodes) && s&(1<<code) != 0
}

// String lists the set's names in code order, comma-separated.
func (s GRPCCodeSet) String() string {
	out := ""
	for c := range grpcCodes {
		if s.Has(c) {
			if out != "" {
				out += ","
			}
			out += grpcCodeName(c)
		}
	}
	return out
}

// grpcCodeName names code c for a response_grpc_status list, where OK (0)
// may be counted too.
func grpcCodeName(c int) string {
	if c == 0 {
		return "ok"
	}
	return grpcCodes[c]
}

// parseGRPCCodeList reads a comma-separated list of gRPC status names
// ("unauthenticated,permission_denied"); it returns a message naming the
// first bad item, or "".
func parseGRPCCodeList(list string) (GRPCCodeSet, string) {
	if list == "" {
		return 0, `names no status; list the gRPC statuses to count after "response_grpc_status:", such as "response_grpc_status:unauthenticated,permission_denied"`
	}
	names := make([]string, len(grpcCodes))
	for c := range grpcCodes {
		names[c] = grpcCodeName(c)
	}
	var s GRPCCodeSet
next:
	for _, item := range strings.Split(list, ",") {
		for c, n := range names {
			if item == n {
				s |= 1 << c
				continue next
			}
		}
		msg := quoteShort(item) + " is not a gRPC status"
		if sg := suggest(item, names); sg != "" {
			msg += " (did you mean " + strconv.Quote(sg) + "?)"
		}
		return 0, msg + "; list gRPC status names in lower case (ok, cancelled, ..., unauthenticated), separated by commas without spaces"
	}
	return s, ""
}
