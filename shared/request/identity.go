package request

import (
	"strings"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// DisplayIdentity renders a bucket's identity for operators: its key
// components as "<source>=<value>" joined with "|". Unless the rule says
// "telemetry_identity": "clear", the values of header:, jwt:, query:,
// cookie: and metadata: sources are masked (MaskValue): they often are
// credentials (API keys, subjects, tokens in query strings, session
// cookies, what an authorization service returned). ip:address, path, method and host are
// shown as is: they are what operators search for and are not secrets.
// A composite too long to be stored verbatim (AppendComposite) is shown as its hash
// only when the rule has a masked source.
func DisplayIdentity(keys []policy.KeySource, clear bool, id string) string {
	masked := false
	if !clear {
		for _, k := range keys {
			if Sensitive(k.Kind) {
				masked = true
			}
		}
	}
	if strings.HasPrefix(id, "#") { // hashed composite: "#<hex>#<prefix>"
		if masked {
			if j := strings.IndexByte(id[1:], '#'); j > 0 {
				return "hashed:" + id[1:1+j]
			}
			return MaskValue(id)
		}
		return id
	}
	comps := SplitComposite(id)
	if len(comps) != len(keys) {
		if masked {
			return MaskValue(id)
		}
		return id
	}
	var sb strings.Builder
	for i, c := range comps {
		if i > 0 {
			sb.WriteByte('|')
		}
		sb.WriteString(keys[i].String())
		sb.WriteByte('=')
		if masked && Sensitive(keys[i].Kind) {
			sb.WriteString(MaskValue(c))
		} else {
			sb.WriteString(c)
		}
	}
	return sb.String()
}

// Sensitive tells whether values of a source may be secrets (API keys,
// tokens, session cookies): displays mask them.
func Sensitive(k policy.SourceKind) bool {
	return k == policy.SourceHeader || k == policy.SourceJWT || k == policy.SourceQuery || k == policy.SourceMetadata || k == policy.SourceCookie
}

// SplitComposite undoes AppendComposite's joining and escaping.
func SplitComposite(s string) []string {
	var out []string
	var cur []byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			cur = append(cur, s[i])
		case c == '|':
			out = append(out, string(cur))
			cur = cur[:0]
		default:
			cur = append(cur, c)
		}
	}
	return append(out, string(cur))
}

// MaskValue shows a secret as its first 4 characters (none when the value
// has fewer than 9), "…", and "#" with 8 hex digits of its FNV-1a 64 hash:
// enough to tell keys apart and to search for a known key, not enough to
// use one.
func MaskValue(v string) string {
	const hex = "0123456789abcdef"
	h := state.FNV1a64(v)
	var sb strings.Builder
	if utf8.RuneCountInString(v) > 8 {
		n := 0
		for i := range v {
			if n == 4 {
				sb.WriteString(v[:i])
				break
			}
			n++
		}
	}
	sb.WriteString("…#")
	for i := 7; i >= 0; i-- {
		sb.WriteByte(hex[(h>>(4*uint(i)))&0xf])
	}
	return sb.String()
}
