package policy

import (
	"errors"
	"slices"
	"strconv"
)

// LegacyHeaders is "legacy_headers": which older fields carry a rule's
// limit, remaining and reset, besides draft-10's RateLimit and
// RateLimit-Policy, for clients written against another limiter.
//
//	false          none (the default)
//	true           RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset
//	               (the draft's versions up to 06; Kong sends these)
//	"x-ratelimit"  X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset
//	               (Envoy's local_ratelimit DRAFT_VERSION_03,
//	               envoyproxy/ratelimit, Higress, GitHub's API)
//
// The three carry the same numbers under either name: the burst (whole
// tokens), the whole tokens left, and the seconds until the bucket is full
// again (on a rejection: until the request's cost is available).
type LegacyHeaders uint8

const (
	LegacyNone       LegacyHeaders = iota // false
	LegacyRateLimit                       // true, or "ratelimit"
	LegacyXRateLimit                      // "x-ratelimit"
)

// legacyPrefixes are the field names' common prefix, by value; the strings
// "legacy_headers" accepts are these.
var legacyPrefixes = [...]string{LegacyRateLimit: "ratelimit", LegacyXRateLimit: "x-ratelimit"}

// On reports whether the older fields are sent.
func (l LegacyHeaders) On() bool { return l != LegacyNone }

// Names returns the lower-case field names of the limit, the remaining
// tokens and the reset; "" for LegacyNone.
func (l LegacyHeaders) Names() (limit, remaining, reset string) {
	if !l.On() || int(l) >= len(legacyPrefixes) {
		return "", "", ""
	}
	prefix := legacyPrefixes[l]
	return prefix + "-limit", prefix + "-remaining", prefix + "-reset"
}

// MarshalJSON writes the normalized form: false, true, or "x-ratelimit",
// so that a configuration written before the string form existed
// normalizes as it always did.
func (l LegacyHeaders) MarshalJSON() ([]byte, error) {
	switch l {
	case LegacyNone:
		return []byte("false"), nil
	case LegacyRateLimit:
		return []byte("true"), nil
	case LegacyXRateLimit:
		return []byte(`"x-ratelimit"`), nil
	}
	return nil, errors.New("legacy_headers: unknown value " + strconv.Itoa(int(l)))
}

// legacyHeaders parses "legacy_headers": a boolean, or the prefix of the
// field names as a string.
func (p *parser) legacyHeaders(cfg *Config, v *jvalue) {
	const want = `must be true, false, "ratelimit" or "x-ratelimit"`
	switch v.kind {
	case jBool:
		if v.b {
			cfg.LegacyHeaders = LegacyRateLimit
		}
	case jString:
		i := slices.Index(legacyPrefixes[:], v.s)
		if i <= 0 { // LegacyNone has no string
			p.errorf("legacy_headers", want, ", got ", strconv.Quote(v.s))
			return
		}
		cfg.LegacyHeaders = LegacyHeaders(i)
	default:
		p.errorf("legacy_headers", want, ", got ", v.kind.String())
	}
}
