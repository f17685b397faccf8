package wasmhost

import (
	"strconv"
	"strings"
)

// Envoy answers a local reply to a gRPC request as gRPC clients expect it
// (Envoy's Http::Utility::prepareLocalReply): a trailers-only response of
// HTTP status 200, whatever status the plugin chose, with the call's
// status in grpc-status and the body, percent-encoded, in grpc-message.

// isGRPCRequest is Envoy's Grpc::Common::isGrpcRequestHeaders: a request
// with a :path whose content-type is application/grpc, alone or followed by
// "+" (application/grpc+proto); application/grpc-web is not gRPC.
func isGRPCRequest(req []Header) bool {
	hasPath, grpc := false, false
	for _, kv := range req {
		switch kv[0] {
		case ":path":
			hasPath = true
		case "content-type":
			rest, ok := strings.CutPrefix(kv[1], "application/grpc")
			grpc = ok && (rest == "" || rest[0] == '+')
		}
	}
	return hasPath && grpc
}

// grpcReplyHeaders builds the trailers-only reply: :status 200, the
// plugin's headers with content-type replaced by application/grpc,
// grpc-status (unless the plugin set one) from the plugin's gRPC status or,
// when it gave none, from the HTTP status, and grpc-message for a body.
func grpcReplyHeaders(l *LocalResponse) []Header {
	h := make([]Header, 0, len(l.Headers)+4)
	h = append(h, Header{":status", "200"})
	hasType, hasStatus := false, false
	for _, kv := range l.Headers {
		switch kv[0] {
		case "content-type":
			hasType = true
			kv[1] = "application/grpc"
		case "grpc-status":
			hasStatus = true
		}
		h = append(h, kv)
	}
	if !hasType {
		h = append(h, Header{"content-type", "application/grpc"})
	}
	if !hasStatus {
		h = append(h, Header{"grpc-status", strconv.Itoa(grpcStatusOf(l))})
	}
	if len(l.Body) > 0 {
		h = append(h, Header{"grpc-message", percentEncode(l.Body)})
	}
	return h
}

// grpcStatusOf is the status Envoy sends: the plugin's when it is a known
// gRPC code (0-16), else gRPC's mapping of the HTTP status.
func grpcStatusOf(l *LocalResponse) int {
	if l.GRPCStatus >= 0 && l.GRPCStatus <= 16 {
		return int(l.GRPCStatus)
	}
	switch l.Status {
	case 400:
		return 13 // INTERNAL
	case 401:
		return 16 // UNAUTHENTICATED
	case 403:
		return 7 // PERMISSION_DENIED
	case 404:
		return 12 // UNIMPLEMENTED
	case 429, 502, 503, 504:
		return 14 // UNAVAILABLE
	}
	return 2 // UNKNOWN
}

// percentEncode is gRPC's encoding of grpc-message as Envoy writes it:
// bytes outside ' '..'}' and '%' as %XX, upper-case.
func percentEncode(b []byte) string {
	const hex = "0123456789ABCDEF"
	var out strings.Builder
	for _, c := range b {
		if c < ' ' || c >= '~' || c == '%' {
			out.WriteByte('%')
			out.WriteByte(hex[c>>4])
			out.WriteByte(hex[c&15])
			continue
		}
		out.WriteByte(c)
	}
	return out.String()
}
