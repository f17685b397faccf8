package wasmhost

import "strconv"

// requestHeaders appends h to dst[:0] (lower-casing names), with missing
// pseudo-headers filled in first.
func requestHeaders(dst []Header, h []Header) []Header {
	var has [4]bool
	for _, kv := range h {
		switch lower(kv[0]) {
		case ":method":
			has[0] = true
		case ":path":
			has[1] = true
		case ":authority":
			has[2] = true
		case ":scheme":
			has[3] = true
		}
	}
	defaults := [4]Header{{":method", "GET"}, {":path", "/"}, {":authority", "localhost"}, {":scheme", "http"}}
	if cap(dst) < len(h)+4 {
		dst = make([]Header, 0, len(h)+4)
	}
	out := dst[:0]
	for i := range has {
		if !has[i] {
			out = append(out, defaults[i]) // pseudo-headers go first, as on the wire
		}
	}
	for _, kv := range h {
		out = append(out, Header{lower(kv[0]), kv[1]})
	}
	return out
}

var defaultResponse = []Header{{":status", "200"}}

// copyHeaders copies h with lower-case names (defaulting an empty response
// to :status 200 when resp).
func copyHeaders(h []Header, resp bool) []Header { return appendHeaders(nil, h, resp) }

// appendHeaders is copyHeaders into dst[:0].
func appendHeaders(dst []Header, h []Header, resp bool) []Header {
	if len(h) == 0 && resp {
		h = defaultResponse
	}
	if cap(dst) < len(h) {
		dst = make([]Header, 0, len(h))
	}
	out := dst[:0]
	for _, kv := range h {
		out = append(out, Header{lower(kv[0]), kv[1]})
	}
	return out
}

func cloneHeaders(h []Header) []Header {
	if h == nil {
		return nil
	}
	return append([]Header(nil), h...)
}

func statusOf(h []Header) int {
	for _, kv := range h {
		if kv[0] == ":status" {
			n, err := strconv.Atoi(kv[1])
			if err == nil {
				return n
			}
			return 0
		}
	}
	return 0
}

func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
