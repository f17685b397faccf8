package policy

import (
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/shared/bodyscan"
)

const sourceForms = `"ip:address", "ip:network", "peer:principal", "header:<name>", "query:<name>", "jwt:<claim>", "cookie:<name>", "metadata:<namespace>:<key>", "path", "method", "host", "route", "cluster", "connection" or "all"`

// maxSourceName bounds header, query and claim names.
const maxSourceName = 256

// ParseSource parses a key source in configuration syntax ("ip:address",
// "header:X-Api-Key", "path", ...). Header names are lower-cased.
func ParseSource(s string) (KeySource, bool) {
	k, msg := parseSource(s)
	return k, msg == ""
}

// parseSource returns the source or a message saying what is wrong.
func parseSource(s string) (KeySource, string) {
	kind, name, hasColon := strings.Cut(s, ":")
	bad := func(why string) (KeySource, string) {
		return KeySource{}, quoteShort(s) + " " + why
	}
	switch kind {
	case "path", "method", "host", "route", "cluster", "connection", "all":
		if hasColon {
			return bad("takes no argument; write " + strconv.Quote(kind))
		}
		return KeySource{Kind: map[string]SourceKind{"path": SourcePath, "method": SourceMethod, "host": SourceHost, "route": SourceRoute,
			"cluster": SourceCluster, "connection": SourceConnection, "all": SourceAll}[kind]}, ""
	case "ip":
		switch {
		case name == "address":
			return KeySource{Kind: SourceIP}, ""
		case name == "network" || strings.HasPrefix(name, "network:"):
			bits, msg := parseNetworkBits(strings.TrimPrefix(strings.TrimPrefix(name, "network"), ":"))
			if msg != "" {
				return bad(msg)
			}
			return KeySource{Kind: SourceIPNetwork, Name: bits}, ""
		}
		return bad(`is not a valid IP source; write "ip:address" (the client address) or "ip:network" (its network: /24 for IPv4, /64 for IPv6)`)
	case "peer":
		if name != "principal" {
			return bad(`is not a valid peer source; write "peer:principal" (the URI SAN of the client's TLS certificate, such as its SPIFFE ID)`)
		}
		return KeySource{Kind: SourcePeer}, ""
	case "header":
		if !hasColon {
			return bad(`needs a header name, e.g. "header:x-api-key"`)
		}
		if msg := checkHeaderName(name); msg != "" {
			return bad("has an invalid header name: " + msg)
		}
		return KeySource{Kind: SourceHeader, Name: strings.ToLower(name)}, ""
	case "query", "jwt":
		what := "query parameter"
		if kind == "jwt" {
			what = "claim"
		}
		switch {
		case !hasColon || name == "":
			return bad("needs a " + what + " name, e.g. \"" + kind + ":" + map[string]string{"query": "api_key", "jwt": "sub"}[kind] + "\"")
		case len(name) > maxSourceName:
			return bad("has a " + what + " name longer than 256 bytes")
		}
		for i := 0; i < len(name); i++ {
			if c := name[i]; c < 0x21 || c == 0x7f || kind == "query" && (c == '&' || c == '=' || c == '#') {
				return bad("has a " + what + " name containing " + quoteByte(name, i) + "; remove it")
			}
		}
		if kind == "query" {
			return KeySource{Kind: SourceQuery, Name: name}, ""
		}
		return KeySource{Kind: SourceJWT, Name: name}, ""
	case "cookie":
		if !hasColon {
			return bad(`needs a cookie name, e.g. "cookie:session"`)
		}
		if msg := checkCookieName(name); msg != "" {
			return bad("has an invalid cookie name: " + msg)
		}
		return KeySource{Kind: SourceCookie, Name: name}, ""
	case "metadata":
		if msg := checkMetadataName(name); msg != "" {
			return bad(msg)
		}
		return KeySource{Kind: SourceMetadata, Name: name}, ""
	}
	switch strings.ToLower(kind) {
	case "path", "method", "host", "route", "cluster", "connection", "all", "ip", "peer", "header", "query", "jwt", "cookie", "metadata":
		return bad("is not a known source: source kinds are lower-case, e.g. " + quoteShort(strings.ToLower(kind)+s[len(kind):]))
	}
	return bad("is not a known source; use " + sourceForms)
}

// checkHeaderName returns "" if s is a valid HTTP header name (an RFC 9110
// token), else what is wrong.
func checkHeaderName(s string) string {
	if s != "" && s[0] == ':' && len(s) <= maxSourceName {
		return "pseudo-headers such as " + quoteShort(s) + ` cannot be used; use the "path", "method" or "host" sources`
	}
	return checkToken(s, "header")
}

// checkCookieName returns "" if s is a valid cookie name (an RFC 6265
// token, compared case-sensitively), else what is wrong.
func checkCookieName(s string) string { return checkToken(s, "cookie") }

// checkToken returns "" if s is a token of at most maxSourceName bytes,
// else what is wrong with the name of a what ("header", "cookie").
func checkToken(s, what string) string {
	switch {
	case s == "":
		return "the name is empty"
	case len(s) > maxSourceName:
		return "the name is longer than 256 bytes"
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return quoteShort(s) + " contains " + quoteByte(s, i) + "; " + what + " names use letters, digits and !#$%&'*+-.^_`|~"
		}
	}
	return ""
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func parseCostSource(s string) (CostSource, string) {
	if s == "fixed" {
		return CostSource{Kind: CostFixed}, ""
	}
	k, msg := parseSource(s)
	switch {
	case msg == "" && k.Kind == SourceHeader:
		return CostSource{Kind: CostHeader, Name: k.Name}, ""
	case msg == "" && k.Kind == SourceQuery:
		return CostSource{Kind: CostQuery, Name: k.Name}, ""
	case msg == "" && k.Kind == SourceMetadata:
		return CostSource{Kind: CostMetadata, Name: k.Name}, ""
	case msg != "" && (strings.HasPrefix(s, "header:") || strings.HasPrefix(s, "query:") || strings.HasPrefix(s, "metadata:")):
		return CostSource{}, msg
	}
	if list, ok := strings.CutPrefix(s, "response_status:"); ok {
		set, msg := parseStatusList(list)
		if msg != "" {
			return CostSource{}, quoteShort(s) + ": " + msg
		}
		return CostSource{Kind: CostResponseStatus, Statuses: set}, ""
	}
	if list, ok := strings.CutPrefix(s, "response_grpc_status:"); ok {
		set, msg := parseGRPCCodeList(list)
		if msg != "" {
			return CostSource{}, quoteShort(s) + ": " + msg
		}
		return CostSource{Kind: CostResponseGRPCStatus, GRPCCodes: set}, ""
	}
	if s == "response_bytes" {
		return CostSource{Kind: CostResponseBytes}, ""
	}
	if strings.HasPrefix(s, "response_bytes:") {
		return CostSource{}, quoteShort(s) + ` takes no argument; write "response_bytes" (the bytes of the response body)`
	}
	if paths, ok := strings.CutPrefix(s, "response_json:"); ok {
		if _, msg := bodyscan.ParsePaths(paths); msg != "" {
			return CostSource{}, quoteShort(s) + " " + msg
		}
		return CostSource{Kind: CostResponseJSON, Name: paths}, ""
	}
	for _, rk := range []struct {
		prefix string
		kind   CostKind
	}{{"response_header:", CostResponseHeader}, {"response_trailer:", CostResponseTrailer}} {
		if name, ok := strings.CutPrefix(s, rk.prefix); ok {
			if m := checkHeaderName(name); m != "" {
				return CostSource{}, quoteShort(s) + " has an invalid header name: " + m
			}
			return CostSource{Kind: rk.kind, Name: strings.ToLower(name)}, ""
		}
	}
	return CostSource{}, quoteShort(s) + ` is not a cost source; use "fixed", "header:<name>", "query:<name>", "metadata:<namespace>:<key>", "response_header:<name>", "response_trailer:<name>", "response_status:<statuses>", "response_grpc_status:<codes>", "response_json:<path>" or "response_bytes"`
}
