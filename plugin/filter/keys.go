package filter

import (
	"encoding/binary"
	"strconv"

	"github.com/sluice-rl/sluice/plugin/headermap"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
)

// This file reads the request attributes rules are keyed and matched on.
//
// Every value is read lazily, at most once per request, and only if some rule
// needs it: a configuration keyed on header:x-api-key makes one host call per
// request, not one per header. A value that is absent, or present but empty,
// is "missing" (see requestSources.get). All parsing here treats its input as
// untrusted data: any bytes, any length, never a panic. The limits on it
// (request.MaxComposite, request.MaxJWT) live with the parsing, in
// shared/request.

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

	headers []cachedValue   // by compiledConfig.headerNames index
	queries []cachedValue   // by compiledConfig.queryNames index
	claims  []cachedValue   // by compiledConfig.claimNames index
	cookies []cachedValue   // by compiledConfig.cookieNames index
	metas   []propertyValue // by compiledConfig.metaPaths index
	nets    []cachedValue   // by compiledConfig.netBits index
	// lastNets is, by compiledConfig.netBits index, the last client
	// address masked and its network, kept across requests: the next
	// request of the same client (keep-alive, HTTP/2 streams) reuses it
	// instead of parsing and writing a prefix again.
	lastNets []lastNetwork

	rawPath, path, method, host, ip cachedValue
	peer, route, cluster, conn      propertyValue

	gen      uint32 // this request's generation, from 1 (see cachedValue)
	jwtState uint8
	jwt      request.Claims

	// vals holds the header values read this request and prop the client
	// address property: the cached values are views of them, valid until
	// the next reset, so reading a request allocates nothing.
	vals []byte
	prop []byte

	// The header map read whole (pairs.go): whole is its state for this
	// request, found the slots of compiledConfig.readNames' values in it
	// (headermap.Index), the map being vals[pairsAt:].
	whole   uint8
	found   []uint64
	pairsAt int
	// presentReads counts the configuration's headers this request was
	// found to carry: those its header-by-header lookups found, or, read
	// whole, every one the map has (the pass finds them all anyway).
	// presentAvg is its moving average over recent requests (pairs.go).
	presentReads int
	presentAvg   int32
}

// maxKeptValues bounds the header-value buffer kept between requests.
const maxKeptValues = 64 << 10

// reset starts a request: every cached value becomes unread. Counting a
// generation instead of clearing the caches matters in wasm, where clearing
// them was 6% of an allowed request's time in the guest. numHeaders is the
// request's header count as the host reported it (0: unknown), which
// decides whether its headers are read in one call (pairs.go).
func (rs *requestSources) reset(cfg *compiledConfig, numHeaders int) {
	rs.gen++
	if cfg != rs.cfg || rs.gen == 0 { // a new configuration, or the count wrapped
		rs.cfg = cfg
		rs.headers = resetCache(rs.headers, len(cfg.headerNames))
		rs.queries = resetCache(rs.queries, len(cfg.queryNames))
		rs.claims = resetCache(rs.claims, len(cfg.claimNames))
		rs.cookies = resetCache(rs.cookies, len(cfg.cookieNames))
		rs.nets = resetCache(rs.nets, len(cfg.netBits))
		rs.lastNets = make([]lastNetwork, len(cfg.netBits))
		rs.rawPath, rs.path, rs.method, rs.host, rs.ip = cachedValue{}, cachedValue{}, cachedValue{}, cachedValue{}, cachedValue{}
		rs.peer.c, rs.route.c, rs.cluster.c, rs.conn.c = cachedValue{}, cachedValue{}, cachedValue{}, cachedValue{}
		rs.metas = resetProperties(rs.metas, len(cfg.metaPaths))
		rs.gen = 1
	}
	rs.vals = rs.vals[:0]
	if cap(rs.vals) > maxKeptValues { // one request's huge headers are not kept for the VM's life
		rs.vals = nil
	}
	rs.startWhole(numHeaders)
	rs.jwtState = unknown
	rs.jwt.Reset()
}

// resetProperties is resetCache for property-backed values; their buffers
// are kept.
func resetProperties(p []propertyValue, n int) []propertyValue {
	for len(p) < n {
		p = append(p, propertyValue{})
	}
	p = p[:n]
	for i := range p {
		p[i].c = cachedValue{}
	}
	return p
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
			c.set(rs.header(rs.cfg.headerNames[s.idx], rs.cfg.headerRead[s.idx]))
		}
	case policy.SourceQuery:
		c = &rs.queries[s.idx]
		if rs.unread(c) {
			p, _ := rs.get(sourceRef{kind: sourceRawPath})
			c.set(request.QueryParam(p, rs.cfg.queryNames[s.idx]))
		}
	case policy.SourceJWT:
		c = &rs.claims[s.idx]
		if rs.unread(c) {
			c.set(rs.claim(rs.cfg.claimNames[s.idx]))
		}
	case policy.SourceCookie:
		c = &rs.cookies[s.idx]
		if rs.unread(c) {
			h, _ := rs.get(sourceRef{kind: policy.SourceHeader, idx: rs.cfg.cookieHeader})
			c.set(request.CookieValue(h, rs.cfg.cookieNames[s.idx]))
		}
	case policy.SourcePath:
		c = &rs.path
		if rs.unread(c) {
			p, _ := rs.get(sourceRef{kind: sourceRawPath})
			c.set(request.PathOnly(p), true)
		}
	case policy.SourceMethod:
		c = &rs.method
		if rs.unread(c) {
			c.set(rs.fixedHeader(fixedMethod))
		}
	case policy.SourceHost:
		c = &rs.host
		if rs.unread(c) {
			h, ok := rs.fixedHeader(fixedHost)
			c.set(request.LowerASCII(h), ok)
		}
	case policy.SourceIP:
		c = &rs.ip
		if rs.unread(c) {
			c.set(rs.clientIP())
		}
	case policy.SourcePeer:
		c = rs.peer.read(rs, peerPrincipalPath)
	case policy.SourceRoute:
		c = rs.route.read(rs, routeNamePath)
	case policy.SourceCluster:
		c = rs.cluster.read(rs, clusterNamePath)
	case policy.SourceConnection:
		c = rs.conn.readNumber(rs, connectionIDPath)
	case policy.SourceMetadata:
		c = rs.metas[s.idx].readMetadata(rs, rs.cfg.metaPaths[s.idx])
	case policy.SourceAll:
		return policy.AllValue, true
	case policy.SourceIPNetwork:
		c = &rs.nets[s.idx]
		if rs.unread(c) {
			rs.readNetwork(c, &rs.lastNets[s.idx], rs.cfg.netMasks[s.idx])
		}
	case sourceRawPath:
		c = &rs.rawPath
		if rs.unread(c) {
			c.set(rs.fixedHeader(fixedPath))
		}
	default:
		return "", false
	}
	return c.v, c.state == present
}

// lastNetwork is a client address and its network, in buffers reused
// from one client to the next (so reading allocates nothing once they
// have grown).
type lastNetwork struct {
	ip, network []byte
	ok          bool
}

// readNetwork sets c to the client address's network, masked with bits.
// The view it sets is valid until another client's network is read here,
// which no request does while it still holds its values.
func (rs *requestSources) readNetwork(c *cachedValue, last *lastNetwork, bits [2]int) {
	ip, ok := rs.get(sourceRef{kind: policy.SourceIP})
	if !ok {
		c.set("", false)
		return
	}
	if len(last.ip) == 0 || bytesView(last.ip) != ip {
		last.ip = append(last.ip[:0], ip...)
		last.network, last.ok = request.AppendNetwork(last.network[:0], ip, bits[0], bits[1])
	}
	c.set(bytesView(last.network), last.ok)
}

// cachedHeader returns s's cached value when s is a header already read
// for this request, else nil (then get reads it). Small enough to inline.
func (rs *requestSources) cachedHeader(s sourceRef) *cachedValue {
	if s.kind != policy.SourceHeader {
		return nil
	}
	if c := &rs.headers[s.idx]; c.gen == rs.gen {
		return c
	}
	return nil
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

// header returns the first value of a request header, a view of rs.vals:
// from the map read whole when the request is read so (pairs.go), else
// with one host call. ri is 1 + the name's index in
// compiledConfig.readNames (0: not one of them).
func (rs *requestSources) header(name string, ri int) (v string, ok bool) {
	if rs.whole != wholeOff && ri > 0 {
		if rs.whole == wholeUnread {
			rs.readWhole()
		}
		if rs.whole == wholeRead {
			b, ok := headermap.Value(rs.vals[rs.pairsAt:], rs.found[ri-1])
			return bytesView(b), ok
		}
	}
	v, rs.vals, ok = getRequestHeader(name, rs.vals)
	if ok {
		rs.presentReads++
	}
	return v, ok
}

// fixedHeader is header for the request header behind a source that is
// not a header (fixedNames: the one list of those names, which the
// configuration also counts for whole-map reads).
func (rs *requestSources) fixedHeader(f int) (v string, ok bool) {
	return rs.header(fixedNames[f], rs.cfg.fixedRead[f])
}

// sourceAddressPath is the serialized property path of the downstream peer
// address ("source", "address").
const sourceAddressPath = "source\x00address"

// Serialized property paths of the sources read from properties:
// "peer:principal", the first URI SAN of the client's TLS certificate,
// which Envoy does not have (NotFound) on a connection without one, and
// "route", the name of the route the request matched ("" for a route
// without a name: missing), and "cluster", the upstream cluster its route
// sends it to (none for a direct response: missing).
const (
	peerPrincipalPath = "connection\x00uri_san_peer_certificate"
	routeNamePath     = "xds\x00route_name"
	clusterNamePath   = "xds\x00cluster_name"
	// connectionIDPath is "connection": the downstream connection's
	// number, a uint64 Envoy hands over as 8 bytes in its own (little-
	// endian) byte order.
	connectionIDPath = "connection\x00id"
)

// propertyValue is a source read from an Envoy property: its cached value,
// a view of buf.
type propertyValue struct {
	c   cachedValue
	buf []byte
}

// read returns the cached value, reading the property at path the first
// time in a request.
func (pv *propertyValue) read(rs *requestSources, path string) *cachedValue {
	return pv.readAs(rs, path, false)
}

// readMetadata is read for a value of the dynamic metadata: a number or
// bool, which Envoy hands over in binary, becomes its text
// (request.AppendMetadataText), written after the value in the same buffer.
func (pv *propertyValue) readMetadata(rs *requestSources, path string) *cachedValue {
	return pv.readAs(rs, path, true)
}

// readNumber is read for a uint64 property, which Envoy hands over as 8
// bytes: its value is the number in decimal, written after the bytes in
// the same buffer. Any other length is missing, not a trap.
func (pv *propertyValue) readNumber(rs *requestSources, path string) *cachedValue {
	if rs.unread(&pv.c) {
		b, ok := getProperty(path, pv.buf)
		if ok && len(b) == 8 {
			n := len(b)
			b = strconv.AppendUint(b, binary.LittleEndian.Uint64(b), 10)
			pv.buf = b
			pv.c.set(bytesView(b[n:]), true)
		} else {
			pv.buf = b
			pv.c.set("", false)
		}
	}
	return &pv.c
}

func (pv *propertyValue) readAs(rs *requestSources, path string, metadata bool) *cachedValue {
	if rs.unread(&pv.c) {
		b, ok := getProperty(path, pv.buf)
		v := b
		if metadata && ok && request.NeedsMetadataText(b) {
			n := len(b)
			b = request.AppendMetadataText(b, b)
			v = b[n:]
		}
		pv.buf = b
		pv.c.set(bytesView(v), ok)
	}
	return &pv.c
}

// clientIP returns the client address: the Nth entry from the right of
// X-Forwarded-For when xff_trusted_hops is N > 0 and the header has at least
// N entries, else the downstream peer address (property source.address).
// Ports are stripped either way.
func (rs *requestSources) clientIP() (string, bool) {
	if hops := rs.cfg.trustedHops; hops > 0 {
		if xff, ok := rs.fixedHeader(fixedXFF); ok {
			if ip, ok := request.XFFClient(xff, hops); ok {
				return ip, true
			}
		}
	}
	b, ok := getProperty(sourceAddressPath, rs.prop)
	rs.prop = b
	if !ok || len(b) == 0 {
		return "", false
	}
	return request.StripPort(bytesView(b)), true
}

// claim returns a claim of the bearer token's payload as a string (see
// request.Claims.Claim). The token is decoded once per request.
func (rs *requestSources) claim(name string) (string, bool) {
	if rs.jwtState == unknown {
		rs.jwtState = missing
		if authz, ok := rs.fixedHeader(fixedAuthz); ok && request.ParseJWT(authz, &rs.jwt) {
			rs.jwtState = present
		}
	}
	if rs.jwtState != present {
		return "", false
	}
	return rs.jwt.Claim(name)
}
