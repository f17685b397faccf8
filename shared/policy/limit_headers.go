package policy

import (
	"strconv"
	"strings"
)

// This file parses "limit_headers": names under which a limit rule's own
// numbers are sent on the responses of the requests it applies to, besides
// the RateLimit fields of the most restrictive rule. Kong's rate-limiting
// sends one pair per period this way (X-RateLimit-Limit-Minute,
// X-RateLimit-Remaining-Minute), and clients written against it read them.

// LimitHeaders are a rule's "limit_headers": the lower-case names of its
// limit, its remaining tokens and its reset, "" for one not sent.
type LimitHeaders struct {
	Limit, Remaining, Reset string
}

// Names returns the names given, in the order limit, remaining, reset.
func (l *LimitHeaders) Names() []string {
	var out []string
	for _, n := range []string{l.Limit, l.Remaining, l.Reset} {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

var limitHeadersFields = []string{"limit", "remaining", "reset"}

// limitHeaders reads a rule's "limit_headers" at path.
func (p *parser) limitHeaders(path string, v *jvalue) *LimitHeaders {
	if v.kind != jObject {
		p.errorf(path, `must be an object such as {"limit": "x-ratelimit-limit-minute", "remaining": "x-ratelimit-remaining-minute"}, got `, v.kind.String())
		return nil
	}
	f := p.object(path, v, limitHeadersFields)
	out := &LimitHeaders{}
	seen := map[string]string{}
	for _, key := range limitHeadersFields {
		nv := f[key]
		if nv == nil {
			continue
		}
		npath := join(path, key)
		if nv.kind != jString {
			p.errorf(npath, `must be a header name such as "x-ratelimit-remaining-minute", got `, nv.kind.String())
			continue
		}
		name := strings.ToLower(nv.s)
		if msg := checkFieldName(name); msg != "" { // reject_headers.go
			p.errorf(npath, msg)
			continue
		}
		if prev, ok := seen[name]; ok {
			p.errorf(npath, "names the same header as ", prev, "; give each number its own")
			continue
		}
		seen[name] = key
		switch key {
		case "limit":
			out.Limit = name
		case "remaining":
			out.Remaining = name
		case "reset":
			out.Reset = name
		}
	}
	if len(v.obj) == 0 {
		p.errorf(path, `is empty; name at least one of "limit", "remaining" and "reset", such as {"remaining": "x-ratelimit-remaining-minute"}`)
	}
	if len(out.Names()) == 0 {
		return nil
	}
	return out
}

// checkLimitHeaders refuses a name that two rules of different policies
// give (both can apply to one request, and one would overwrite the other),
// or that a rule's rejections already carry as one of its reject_headers.
// Rules of one policy may share names: only one of them applies. A shadow
// rule sends no fields, so its names overwrite nothing (a shadow trial of
// a draft keeps the names of the rules it copies).
func (p *parser) checkLimitHeaders(cfg *Config) {
	type owner struct{ policy, rule string }
	first := map[string]owner{}
	for pi := range cfg.Policies {
		pol := &cfg.Policies[pi]
		for ri := range pol.Rules {
			r := &pol.Rules[ri]
			if r.LimitHeaders == nil || r.Mode == ModeShadow {
				continue
			}
			path := p.rulePaths[r.Name]
			path = strings.TrimSuffix(path, ".name") + ".limit_headers"
			for _, name := range r.LimitHeaders.Names() {
				if o, ok := first[name]; ok && o.policy != pol.Name {
					p.errorf(path, strconv.Quote(name), " is also rule ", strconv.Quote(o.rule), "'s (policy ", strconv.Quote(o.policy),
						"), which can apply to the same request; give the rules of different policies different names")
				} else if !ok {
					first[name] = owner{pol.Name, r.Name}
				}
				for _, h := range cfg.RejectHeadersOf(r) {
					if h.Name == name {
						p.errorf(path, strconv.Quote(name), " is also one of the rule's reject_headers; a rejection would carry it twice")
					}
				}
			}
		}
	}
}
