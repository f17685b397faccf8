package request

import "strings"

// CookieValue returns the value of the cookie name in a Cookie header
// ("a=1; session=xyz"), and whether the header has it. Names compare
// exactly (cookie names are case-sensitive); the first pair with the name
// wins, as browsers send the most specific cookie first; a value in
// double quotes is returned without them. White space around a pair and
// after its name is ignored; a value is taken as written. net/http and
// Envoy's cookie matchers read cookies the same way, and Envoy joins the
// cookie fields of an HTTP/2 request into one header with "; ".
func CookieValue(header, name string) (string, bool) {
	for i := 0; i < len(header); i++ {
		for i < len(header) && isSpace(header[i]) {
			i++
		}
		end := strings.IndexByte(header[i:], ';')
		if end < 0 {
			end = len(header)
		} else {
			end += i
		}
		// Only a pair that starts with the name is looked at closer.
		if pair := header[i:end]; strings.HasPrefix(pair, name) {
			rest := pair[len(name):]
			for rest != "" && isSpace(rest[0]) {
				rest = rest[1:]
			}
			if rest != "" && rest[0] == '=' {
				return unquote(trimRightSpace(rest[1:])), true
			}
		}
		i = end
	}
	return "", false
}

// unquote removes the double quotes around a cookie's value.
func unquote(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1]
	}
	return v
}

// trimRightSpace trims the white space after a value, as net/http and
// Envoy do (Envoy refuses CR and LF in header values; the simulator takes
// any).
func trimRightSpace(s string) string {
	for s != "" && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
