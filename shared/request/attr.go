// Package request reads a request's attributes as the filter does: the
// client address (X-Forwarded-For hops, ports), the path and its query
// parameters, the bearer token's claims, the composite key of a rule's
// limit_keys, and the identity shown to operators (masked). The filter
// (plugin/filter) and the admin's request simulator (shared/simulate) call
// this same code, so a simulated request is keyed exactly as a real one.
//
// Everything here treats its input as untrusted data: any bytes, any
// length, never a panic. Nothing here does I/O.
package request

import (
	"strings"
	"unsafe"

	"github.com/sluice-rl/sluice/shared/state"
)

// Limits on untrusted input.
const (
	// MaxComposite is the longest composite key stored verbatim. Longer keys
	// (a 10k-character header, say) are replaced by a hash; see
	// AppendComposite. It is state.MaxIdentity, so the composite is also
	// the identity stored in bounded slot values, unchanged.
	MaxComposite = state.MaxIdentity
	// MaxJWT bounds the bearer token ParseJWT is willing to decode. Real
	// tokens are a few hundred bytes to a few KiB.
	MaxJWT = 16 << 10
	// HashedPrefix is how many bytes of a long composite key are kept, for
	// readability, after its hash (state.AppendIdentity).
	HashedPrefix = 64
)

// view returns b as a string without copying; b must not be modified while
// the string is in use.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// StripPort removes the port from an address as Envoy formats
// source.address: "10.0.0.1:5555" -> "10.0.0.1", "[::1]:5555" -> "::1".
// A bracketed IPv6 address loses its brackets. An address with several colons
// and no brackets (a bare IPv6 address) or no colon is returned unchanged.
func StripPort(addr string) string {
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

// XFFClient returns the hops-th entry from the right of an X-Forwarded-For
// value (hops >= 1: 1 is the rightmost entry, the one appended by the proxy
// closest to Envoy), port stripped. It reports false when the header has
// fewer than hops entries or that entry is empty.
func XFFClient(xff string, hops int) (string, bool) {
	if hops < 1 {
		return "", false
	}
	end := len(xff)
	for n := 1; ; n++ {
		start := strings.LastIndexByte(xff[:end], ',') + 1 // 0 when no comma left
		if n == hops {
			e := StripPort(xff[start:end])
			return e, e != ""
		}
		if start == 0 {
			return "", false // fewer than hops entries
		}
		end = start - 1
	}
}

// PathOnly returns the :path without its query string or fragment.
func PathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// QueryParam returns the percent-decoded value of the first query parameter
// of the :path p whose percent-decoded name is name ("+" decodes to a space,
// as in HTML forms). A parameter without "=" has an empty value. Invalid
// percent escapes are kept literally.
func QueryParam(p, name string) (string, bool) {
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
		if UnescapeQuery(k) == name {
			return UnescapeQuery(v), true
		}
	}
	return "", false
}

// UnescapeQuery decodes %XX escapes and '+' (space). It allocates only when
// there is something to decode.
func UnescapeQuery(s string) string {
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

// LowerASCII lower-cases ASCII letters, allocating only if there are any
// upper-case ones (the :authority is almost always lower-case already).
func LowerASCII(s string) string {
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

// AppendComposite appends the composite key made of the given components to
// dst. Components are joined with '|'; inside a component the characters
// '\', '|' and '#' are escaped with a backslash, so ["a|b"] and ["a", "b"]
// give different keys and a composite never contains an unescaped '#'.
//
// A composite longer than MaxComposite bytes is replaced by
// "#<16 hex digits of FNV-1a 64 of the full composite>#<its first HashedPrefix
// bytes>": a 10 KiB header costs the same shared-data memory as a short one.
// The leading '#' cannot start a verbatim composite, so hashed and verbatim
// keys never collide. FNV is not collision resistant against an adversary who
// knows the other key, but bucket keys are never shown to clients, so an
// attacker would need the victim's (long) key to collide with it, and with
// that key they could share the bucket anyway.
//
// scratch is a reusable buffer; the (possibly grown) buffer is returned so
// the caller can keep it.
func AppendComposite(dst, scratch []byte, comps []string) (out, scratchOut []byte) {
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
	// state.AppendIdentity keeps up to MaxComposite bytes verbatim and
	// hashes longer ones; bytesView is safe: s is not modified before it
	// returns and nothing retains the view.
	return state.AppendIdentity(dst, view(s)), s
}
