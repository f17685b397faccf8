package policy

import (
	"sort"
	"strconv"
	"strings"
)

// This file parses "reject_headers": fields of your own sent with a
// rejection, beside the filter's, at the top level (every limit rule's
// rejections) or on a limit or deny rule (its own rejections). Envoy's
// local_ratelimit sends its response_headers_to_add this way; a client or
// a log pipeline that looks for x-local-rate-limit keeps finding it.

// Bounds of "reject_headers".
const (
	// MaxRejectHeaders bounds the fields of one "reject_headers": each is
	// written on every rejection, under load.
	MaxRejectHeaders = 16
	// maxRejectHeaderValue bounds a value in bytes.
	maxRejectHeaderValue = 1024
)

// RejectHeader is one field of "reject_headers", its name lower-cased.
type RejectHeader struct {
	Name, Value string
}

// reservedRejectHeaders are the fields a rejection carries already, and why
// they cannot be given: the filter writes them, or Envoy does.
var reservedRejectHeaders = map[string]string{
	"retry-after":           "the filter sends it with every rejection",
	"ratelimit":             "the filter sends it with every rejection",
	"ratelimit-policy":      "the filter sends it with every rejection",
	"x-ratelimit-reason":    "the filter sends it with every rejection",
	"ratelimit-limit":       `the filter sends it with "legacy_headers": true`,
	"ratelimit-remaining":   `the filter sends it with "legacy_headers": true`,
	"ratelimit-reset":       `the filter sends it with "legacy_headers": true`,
	"x-ratelimit-limit":     `the filter sends it with "legacy_headers": "x-ratelimit"`,
	"x-ratelimit-remaining": `the filter sends it with "legacy_headers": "x-ratelimit"`,
	"x-ratelimit-reset":     `the filter sends it with "legacy_headers": "x-ratelimit"`,
	"content-type":          `set it with "reject_content_type"`,
	"content-length":        "Envoy sets it",
	"transfer-encoding":     "Envoy sets it",
	"connection":            "Envoy sets it",
	"keep-alive":            "Envoy sets it",
	"proxy-connection":      "Envoy sets it",
	"upgrade":               "Envoy sets it",
	"te":                    "Envoy sets it",
	"trailer":               "Envoy sets it",
	"grpc-status":           "Envoy sets it on a gRPC call's rejection",
	"grpc-message":          "Envoy sets it on a gRPC call's rejection",
}

// RejectHeadersOf are the fields of your own a rejection by r carries:
// the rule's "reject_headers" when it has some (an empty object sends
// none), else, for a limit rule, the configuration's.
func (c *Config) RejectHeadersOf(r *Rule) []RejectHeader {
	if r.RejectHeaders != nil || r.Action != ActionLimit {
		return r.RejectHeaders
	}
	return c.RejectHeaders
}

// rejectHeaders reads "reject_headers" at path: an object of header names
// to values. The result is sorted by name, and not nil when v is an empty
// object.
func (p *parser) rejectHeaders(path string, v *jvalue) []RejectHeader {
	if v.kind != jObject {
		p.errorf(path, `must be an object of header names to values, such as {"x-local-rate-limit": "true"}, got `, v.kind.String())
		return nil
	}
	if len(v.obj) > MaxRejectHeaders {
		p.errorf(path, "has ", strconv.Itoa(len(v.obj)), " fields; at most ", strconv.Itoa(MaxRejectHeaders), " are allowed")
		return nil
	}
	out := make([]RejectHeader, 0, len(v.obj))
	seen := make(map[string]string, len(v.obj))
	for _, m := range v.obj {
		hpath := join(path, m.key)
		name := strings.ToLower(m.key)
		if msg := checkFieldName(name); msg != "" {
			p.errorf(hpath, msg)
			continue
		}
		if prev, ok := seen[name]; ok {
			p.errorf(hpath, "names the same header as ", strconv.Quote(prev), " (header names ignore case); give it once")
			continue
		}
		seen[name] = m.key
		if m.val.kind != jString {
			p.errorf(hpath, `must be a string (the header's value, such as "true"), got `, m.val.kind.String())
			continue
		}
		if msg := checkHeaderValue(m.val.s); msg != "" {
			p.errorf(hpath, msg)
			continue
		}
		out = append(out, RejectHeader{Name: name, Value: m.val.s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// CheckRejectHeader says what is wrong with name and value as a field of
// "reject_headers", or "" if nothing is: for converters, which leave out
// what the filter would refuse.
func CheckRejectHeader(name, value string) string {
	if msg := checkFieldName(strings.ToLower(name)); msg != "" {
		return msg
	}
	return checkHeaderValue(value)
}

// checkFieldName says what is wrong with name (lower case) as a response
// field of your own ("reject_headers", "limit_headers"): not a token, a
// pseudo-header, or a field the filter or Envoy writes itself; "" if
// nothing is.
func checkFieldName(name string) string {
	if msg := checkHeaderName(name); msg != "" {
		return msg
	}
	if why, ok := reservedRejectHeaders[name]; ok {
		return strconv.Quote(name) + " cannot be set here: " + why
	}
	return ""
}

// checkHeaderValue accepts a non-empty value of printable ASCII (tabs and
// spaces inside it), which every client and proxy passes as written.
func checkHeaderValue(s string) string {
	switch {
	case s == "":
		return `is empty; give the header a value, such as "true"`
	case len(s) > maxRejectHeaderValue:
		return "is " + strconv.Itoa(len(s)) + " bytes long; at most " + strconv.Itoa(maxRejectHeaderValue) + " are allowed"
	case isSpaceOrTab(s[0]) || isSpaceOrTab(s[len(s)-1]):
		return "starts or ends with white space, which Envoy would strip; remove it"
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c > 0x7e {
			return quoteShort(s) + " contains " + quoteByte(s, i) + "; a header value here is printable ASCII"
		}
	}
	return ""
}

func isSpaceOrTab(c byte) bool { return c == ' ' || c == '\t' }
