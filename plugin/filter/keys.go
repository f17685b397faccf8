package filter

import (
	"math"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// This file reads the request attributes rules are keyed and matched on.
//
// Every value is read lazily, at most once per request, and only if some rule
// needs it: a configuration keyed on header:x-api-key makes one host call per
// request, not one per header. A value that is absent, or present but empty,
// is "missing" (see requestSources.get). All parsing here treats its input as
// untrusted data: any bytes, any length, never a panic.

// Limits on untrusted input.
const (
	// maxComposite is the longest composite key stored verbatim. Longer keys
	// (a 10k-character header, say) are replaced by a hash; see
	// appendComposite. It is state.MaxIdentity, so the composite is also
	// the identity stored in bounded slot values, unchanged.
	maxComposite = state.MaxIdentity
	// hashedPrefix is how many bytes of a long composite key are kept, for
	// readability, after its hash (state.AppendIdentity).
	hashedPrefix = 64
	// maxJWT bounds the bearer token we are willing to decode. Real tokens
	// are a few hundred bytes to a few KiB.
	maxJWT = 16 << 10
)

// sourceRef is a compiled policy.KeySource: the kind plus an index into the
// per-request cache of the values of that kind (headers, query parameters or
// JWT claims); idx is unused for the other kinds.
type sourceRef struct {
	kind policy.SourceKind
	idx  int
}

// Value states in the per-request cache.
const (
	unknown uint8 = iota // not read yet
	present
	missing
)

// cachedValue is one source's value for the request whose generation is
// gen (requestSources.gen); for any earlier one it is not read yet. So a
// new request invalidates every cached value by counting, not clearing.
type cachedValue struct {
	v     string
	state uint8
	gen   uint32
}

// requestSources is the lazy, per-request cache of request attributes. One
// instance lives in the plugin context and is reset for every request (a VM
// runs one callback at a time, so requests never interleave inside it).
type requestSources struct {
	cfg *compiledConfig

	headers []cachedValue // by compiledConfig.headerNames index
	queries []cachedValue // by compiledConfig.queryNames index
	claims  []cachedValue // by compiledConfig.claimNames index

	rawPath, path, method, host, ip cachedValue

	gen      uint32 // this request's generation, from 1 (see cachedValue)
	jwtState uint8
	jwt      jwtClaims

	// vals holds the header values read this request and prop the client
	// address property: the cached values are views of them, valid until
	// the next reset, so reading a request allocates nothing.
	vals []byte
	prop []byte
}

// maxKeptValues bounds the header-value buffer kept between requests.
const maxKeptValues = 64 << 10

// reset starts a request: every cached value becomes unread. Counting a
// generation instead of clearing the caches matters in wasm, where clearing
// them was 6% of an allowed request's time in the guest.
func (rs *requestSources) reset(cfg *compiledConfig) {
	rs.gen++
	if cfg != rs.cfg || rs.gen == 0 { // a new configuration, or the count wrapped
		rs.cfg = cfg
		rs.headers = resetCache(rs.headers, len(cfg.headerNames))
		rs.queries = resetCache(rs.queries, len(cfg.queryNames))
		rs.claims = resetCache(rs.claims, len(cfg.claimNames))
		rs.rawPath, rs.path, rs.method, rs.host, rs.ip = cachedValue{}, cachedValue{}, cachedValue{}, cachedValue{}, cachedValue{}
		rs.gen = 1
	}
	rs.vals = rs.vals[:0]
	if cap(rs.vals) > maxKeptValues { // one request's huge headers are not kept for the VM's life
		rs.vals = nil
	}
	rs.jwtState = unknown
	rs.jwt.payload = ""
	rs.jwt.members = rs.jwt.members[:0] // views of buffers the filter owns
}

func resetCache(c []cachedValue, n int) []cachedValue {
	if cap(c) < n {
		c = make([]cachedValue, n)
	}
	c = c[:n]
	clear(c)
	return c
}

// get returns the value of a source for the current request and whether it
// is present. Absent and empty values are both reported as missing: a client
// sending "x-api-key:" (empty) is treated exactly like one sending no key.
func (rs *requestSources) get(s sourceRef) (string, bool) {
	var c *cachedValue
	switch s.kind {
	case policy.SourceHeader:
		c = &rs.headers[s.idx]
		if rs.unread(c) {
			c.set(rs.header(rs.cfg.headerNames[s.idx]))
		}
	case policy.SourceQuery:
		c = &rs.queries[s.idx]
		if rs.unread(c) {
			p, _ := rs.get(sourceRef{kind: sourceRawPath})
			c.set(queryParam(p, rs.cfg.queryNames[s.idx]))
		}
	case policy.SourceJWT:
		c = &rs.claims[s.idx]
		if rs.unread(c) {
			c.set(rs.claim(rs.cfg.claimNames[s.idx]))
		}
	case policy.SourcePath:
		c = &rs.path
		if rs.unread(c) {
			p, _ := rs.get(sourceRef{kind: sourceRawPath})
			c.set(pathOnly(p), true)
		}
	case policy.SourceMethod:
		c = &rs.method
		if rs.unread(c) {
			c.set(rs.header(":method"))
		}
	case policy.SourceHost:
		c = &rs.host
		if rs.unread(c) {
			h, ok := rs.header(":authority")
			c.set(lowerASCII(h), ok)
		}
	case policy.SourceIP:
		c = &rs.ip
		if rs.unread(c) {
			c.set(rs.clientIP())
		}
	case sourceRawPath:
		c = &rs.rawPath
		if rs.unread(c) {
			c.set(rs.header(":path"))
		}
	default:
		return "", false
	}
	return c.v, c.state == present
}

// sourceRawPath is an internal kind: the :path pseudo-header with its query.
const sourceRawPath policy.SourceKind = -1

func (c *cachedValue) set(v string, ok bool) {
	if ok && v != "" {
		c.v, c.state = v, present
	} else {
		c.v, c.state = "", missing
	}
}

// unread reports whether c has not been read for this request yet, and
// counts it as read from now on.
func (rs *requestSources) unread(c *cachedValue) bool {
	if c.gen == rs.gen {
		return false
	}
	c.gen = rs.gen
	return true
}

// header returns the first value of a request header, a view of rs.vals.
func (rs *requestSources) header(name string) (v string, ok bool) {
	v, rs.vals, ok = getRequestHeader(name, rs.vals)
	return v, ok
}

// sourceAddressPath is the serialized property path of the downstream peer
// address ("source", "address").
const sourceAddressPath = "source\x00address"

// clientIP returns the client address: the Nth entry from the right of
// X-Forwarded-For when xff_trusted_hops is N > 0 and the header has at least
// N entries, else the downstream peer address (property source.address).
// Ports are stripped either way.
func (rs *requestSources) clientIP() (string, bool) {
	if hops := rs.cfg.trustedHops; hops > 0 {
		if xff, ok := rs.header("x-forwarded-for"); ok {
			if ip, ok := xffClient(xff, hops); ok {
				return ip, true
			}
		}
	}
	b, ok := getProperty(sourceAddressPath, rs.prop)
	rs.prop = b
	if !ok || len(b) == 0 {
		return "", false
	}
	return stripPort(bytesView(b)), true
}

// claim returns a claim of the bearer token's payload as a string (see
// jwtClaims.claim). The token is decoded once per request.
func (rs *requestSources) claim(name string) (string, bool) {
	if rs.jwtState == unknown {
		rs.jwtState = missing
		if authz, ok := rs.header("authorization"); ok && parseJWT(authz, &rs.jwt) {
			rs.jwtState = present
		}
	}
	if rs.jwtState != present {
		return "", false
	}
	return rs.jwt.claim(name)
}

// ---------------------------------------------------------------------------
// Pure parsing helpers (unit-tested natively).

// stripPort removes the port from an address as Envoy formats
// source.address: "10.0.0.1:5555" -> "10.0.0.1", "[::1]:5555" -> "::1".
// A bracketed IPv6 address loses its brackets. An address with several colons
// and no brackets (a bare IPv6 address) or no colon is returned unchanged.
func stripPort(addr string) string {
	addr = strings.TrimSpace(addr)
	if strings.HasPrefix(addr, "[") {
		if end := strings.IndexByte(addr, ']'); end > 0 {
			return addr[1:end]
		}
		return addr
	}
	if i := strings.IndexByte(addr, ':'); i >= 0 && strings.IndexByte(addr[i+1:], ':') < 0 {
		return addr[:i]
	}
	return addr
}

// xffClient returns the hops-th entry from the right of an X-Forwarded-For
// value (hops >= 1: 1 is the rightmost entry, the one appended by the proxy
// closest to Envoy), port stripped. It reports false when the header has
// fewer than hops entries or that entry is empty.
func xffClient(xff string, hops int) (string, bool) {
	if hops < 1 {
		return "", false
	}
	end := len(xff)
	for n := 1; ; n++ {
		start := strings.LastIndexByte(xff[:end], ',') + 1 // 0 when no comma left
		if n == hops {
			e := stripPort(xff[start:end])
			return e, e != ""
		}
		if start == 0 {
			return "", false // fewer than hops entries
		}
		end = start - 1
	}
}

// pathOnly returns the :path without its query string or fragment.
func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// queryParam returns the percent-decoded value of the first query parameter
// of the :path p whose percent-decoded name is name ("+" decodes to a space,
// as in HTML forms). A parameter without "=" has an empty value. Invalid
// percent escapes are kept literally.
func queryParam(p, name string) (string, bool) {
	q := p
	if i := strings.IndexByte(q, '?'); i >= 0 {
		q = q[i+1:]
	} else {
		return "", false
	}
	if i := strings.IndexByte(q, '#'); i >= 0 {
		q = q[:i]
	}
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		if unescapeQuery(k) == name {
			return unescapeQuery(v), true
		}
	}
	return "", false
}

// unescapeQuery decodes %XX escapes and '+' (space). It allocates only when
// there is something to decode.
func unescapeQuery(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// lowerASCII lower-cases ASCII letters, allocating only if there are any
// upper-case ones (the :authority is almost always lower-case already).
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c >= 'A' && c <= 'Z' {
					b[j] = c + ('a' - 'A')
				}
			}
			return string(b)
		}
	}
	return s
}

// appendComposite appends the composite key made of the given components to
// dst. Components are joined with '|'; inside a component the characters
// '\', '|' and '#' are escaped with a backslash, so ["a|b"] and ["a", "b"]
// give different keys and a composite never contains an unescaped '#'.
//
// A composite longer than maxComposite bytes is replaced by
// "#<16 hex digits of FNV-1a 64 of the full composite>#<its first hashedPrefix
// bytes>": a 10 KiB header costs the same shared-data memory as a short one.
// The leading '#' cannot start a verbatim composite, so hashed and verbatim
// keys never collide. FNV is not collision resistant against an adversary who
// knows the other key, but bucket keys are never shown to clients, so an
// attacker would need the victim's (long) key to collide with it, and with
// that key they could share the bucket anyway.
//
// scratch is a reusable buffer; the (possibly grown) buffer is returned so
// the caller can keep it.
func appendComposite(dst, scratch []byte, comps []string) (out, scratchOut []byte) {
	s := scratch[:0]
	for i, c := range comps {
		if i > 0 {
			s = append(s, '|')
		}
		for j := 0; j < len(c); j++ {
			switch b := c[j]; b {
			case '\\', '|', '#':
				s = append(s, '\\', b)
			default:
				s = append(s, b)
			}
		}
	}
	// state.AppendIdentity keeps up to maxComposite bytes verbatim and
	// hashes longer ones; bytesView is safe: s is not modified before it
	// returns and nothing retains the view.
	return state.AppendIdentity(dst, bytesView(s)), s
}

// appendInt is strconv.AppendInt for the common int64 case.
// appendInt appends v in decimal. Values in [0, 2^32) (slot numbers, header
// values) are printed with 32-bit divisions, which wasm does with one
// multiply each; strconv's 64-bit path needs a 128-bit product per two
// digits, which wasm has no instruction for.
func appendInt(dst []byte, v int64) []byte {
	if v < 0 || v > math.MaxUint32 {
		return strconv.AppendInt(dst, v, 10)
	}
	var buf [10]byte
	i := len(buf)
	for u := uint32(v); ; {
		q := u / 10
		i--
		buf[i] = byte('0' + u - q*10)
		if q == 0 {
			break
		}
		u = q
	}
	return append(dst, buf[i:]...)
}
