package policy

import (
	"strconv"
	"strings"
)

// This file parses a rule's "action" (limit, exempt, deny) with deny_status,
// and a limit rule's per-identity "overrides".

// Rule actions.
const (
	ActionLimit  = "limit"  // the default: the rule's algorithm limits the request
	ActionExempt = "exempt" // a matching request is limited by no rule of any policy
	ActionDeny   = "deny"   // a matching request is rejected at once with deny_status
)

// Defaults and bounds of actions and overrides.
const (
	DefaultDenyStatus = 403
	// MaxOverrides bounds a rule's overrides. The filter looks an identity
	// up in a hash table, so their number does not slow requests; the
	// configuration's size is what limits it (docs/configuration.md).
	MaxOverrides = 100000
	// MaxOverrideKey bounds an override's key in bytes.
	MaxOverrideKey = 1024
)

var (
	actions        = []string{ActionLimit, ActionExempt, ActionDeny}
	overrideFields = []string{"key", "algorithm_config"}
	// What an override's algorithm_config may set: the limits, never what
	// shapes the state (window lengths) or the cost.
	tokenBucketOverrideFields = []string{"tokens_per_second", "rps", "burst"}
	windowOverrideFields      = []string{"limit"}
	rollingOverrideFields     = []string{"limit", "max_per_period"}
)

// Override is one entry of a rule's "overrides": the identity Key (the
// composite key as the rule builds it from its limit_keys) gets these
// limits instead of the rule's. TokenBucket or Window (after the rule's
// algorithm) is the rule's algorithm_config with the override's fields
// applied, complete and validated.
type Override struct {
	Key         string
	TokenBucket *TokenBucket
	Window      *Window
}

// action reads "action" and "deny_status".
func (p *parser) action(path string, f map[string]*jvalue) (string, int) {
	act, status := ActionLimit, 0
	if av := f["action"]; av != nil {
		apath := join(path, "action")
		switch {
		case av.kind == jString && (av.s == ActionLimit || av.s == ActionExempt || av.s == ActionDeny):
			act = av.s
		case av.kind == jString:
			p.errorf(apath, "unknown action ", quoteShort(av.s), "; use one of: ", quoteList(actions))
			return "", 0
		default:
			p.errorf(apath, "must be a string, one of: ", quoteList(actions), "; got ", av.kind.String())
			return "", 0
		}
	}
	if dv := f["deny_status"]; dv != nil {
		dpath := join(path, "deny_status")
		if act != ActionDeny {
			p.errorf(dpath, `applies only to rules with "action": "deny"; remove it`)
		} else if n, ok := p.integer(dpath, dv, 200, 599, "an HTTP status code from 200 to 599 (default 403)"); ok {
			status = n
		}
	} else if act == ActionDeny {
		status = DefaultDenyStatus
	}
	return act, status
}

// actionRule checks an exempt or deny rule: it limits nothing, so it takes
// none of a limit rule's fields.
func (p *parser) actionRule(path string, f map[string]*jvalue, r *Rule) {
	for _, name := range []string{"algorithm", "algorithm_config", "max_keys", "scope", "overrides"} {
		if f[name] != nil {
			p.errorf(join(path, name), "does not apply to an ", strconv.Quote(r.Action), ` rule, which limits nothing; remove it (or use "action": "limit")`)
		}
	}
	r.MaxKeys = 0
}

// overrides parses a limit rule's "overrides"; cfg is the rule's
// algorithm_config, already parsed into r.
func (p *parser) overrides(path string, v *jvalue, r *Rule, cfg *jvalue) []Override {
	switch {
	case v.kind != jArray:
		p.errorf(path, `must be an array such as [{"key": "customer-42", "algorithm_config": {"tokens_per_second": 50, "burst": 100}}], got `, v.kind.String())
		return nil
	case len(v.arr) > MaxOverrides:
		p.errorf(path, "has ", strconv.Itoa(len(v.arr)), " entries; at most ", strconv.Itoa(MaxOverrides), " are allowed per rule")
		return nil
	case r.Global:
		p.errorf(path, `cannot be used with "scope": "global" (the rate limit service keeps one limit per global rule)`)
		return nil
	case cfg == nil || (r.TokenBucket == nil && r.Window == nil):
		return nil // the rule's algorithm_config is missing or invalid: reported already
	}
	allowed := tokenBucketOverrideFields
	switch r.Algorithm {
	case AlgorithmFixedWindow, AlgorithmSlidingWindow:
		allowed = windowOverrideFields
	case AlgorithmRollingWindow:
		allowed = rollingOverrideFields
	}
	out := make([]Override, 0, len(v.arr))
	seen := make(map[string]int, len(v.arr))
	for i, ov := range v.arr {
		opath := index(path, i)
		if ov.kind != jObject {
			p.errorf(opath, `must be an object such as {"key": "customer-42", "algorithm_config": {...}}, got `, ov.kind.String())
			continue
		}
		before := len(p.errs)
		f := p.object(opath, ov, overrideFields)
		o := Override{}
		kpath := join(opath, "key")
		switch kv := f["key"]; {
		case kv == nil:
			p.errorf(kpath, "missing; give the identity as the rule builds it from its limit_keys (values joined with |)")
		case kv.kind != jString:
			p.errorf(kpath, "must be a string (the identity as the rule builds it from its limit_keys), got ", kv.kind.String())
		default:
			if msg := checkOverrideKey(kv.s, len(r.Keys)); msg != "" {
				p.errorf(kpath, msg)
			} else if j, dup := seen[kv.s]; dup {
				p.errorf(kpath, "duplicate key ", quoteShort(kv.s), " (also at ", index(path, j), "); give each identity once")
			} else {
				seen[kv.s] = i
				o.Key = kv.s
			}
		}
		cpath := join(opath, "algorithm_config")
		cv := f["algorithm_config"]
		switch {
		case cv == nil:
			p.errorf(cpath, "missing; give the identity's limits, e.g. {", strings.Join(allowed, ", "), "}")
		case cv.kind != jObject:
			p.errorf(cpath, "must be an object with some of: ", strings.Join(allowed, ", "), "; got ", cv.kind.String())
		case len(cv.obj) == 0:
			p.errorf(cpath, "is empty; set at least one of: ", strings.Join(allowed, ", "))
		default:
			if p.object(cpath, cv, allowed); len(p.errs) != before {
				continue // a bad key or an unknown field: reported
			}
			merged := mergeConfig(cfg, cv)
			if r.Window != nil {
				o.Window = p.window(cpath, merged, r.Algorithm)
			} else {
				o.TokenBucket = p.tokenBucket(cpath, merged)
			}
		}
		if len(p.errs) == before {
			out = append(out, o)
		}
	}
	return out
}

// mergeConfig returns the rule's algorithm_config with the override's fields
// replacing its own (tokens_per_second and its alias rps replace each other).
func mergeConfig(rule, ov *jvalue) *jvalue {
	set := make(map[string]bool, len(ov.obj)+1)
	for _, m := range ov.obj {
		set[m.key] = true
		if m.key == "rps" || m.key == "tokens_per_second" {
			set["rps"], set["tokens_per_second"] = true, true
		}
	}
	out := &jvalue{kind: jObject, obj: make([]jmember, 0, len(rule.obj)+len(ov.obj))}
	for _, m := range rule.obj {
		if !set[m.key] {
			out.obj = append(out.obj, m)
		}
	}
	out.obj = append(out.obj, ov.obj...)
	return out
}

// checkOverrideKey checks an override key against a rule with n limit keys:
// n non-empty values joined by "|", with "\", "|" and "#" inside a value
// escaped by a backslash, as the filter builds the identity.
func checkOverrideKey(k string, n int) string {
	switch {
	case k == "":
		return "is empty; give the identity as the rule builds it from its limit_keys"
	case len(k) > MaxOverrideKey:
		return "is " + strconv.Itoa(len(k)) + " bytes long; an override key may have at most " + strconv.Itoa(MaxOverrideKey)
	}
	parts, start := 1, 0
	for i := 0; i < len(k); i++ {
		switch k[i] {
		case '\\':
			if i+1 == len(k) || (k[i+1] != '\\' && k[i+1] != '|' && k[i+1] != '#') {
				return quoteShort(k) + ` has a "\" that escapes nothing; inside a value write \\, \| and \# for \, | and #`
			}
			i++
		case '#':
			return quoteShort(k) + ` contains an unescaped "#"; write \# for a # inside a value`
		case '|':
			if i == start {
				return quoteShort(k) + " has an empty value; every limit key must have a value"
			}
			parts++
			start = i + 1
		}
	}
	switch {
	case start == len(k):
		return quoteShort(k) + " has an empty value; every limit key must have a value"
	case parts != n:
		return quoteShort(k) + " has " + strconv.Itoa(parts) + " values joined by |, but the rule has " + strconv.Itoa(n) +
			" limit_keys; give one value per limit key, in order (escape a | inside a value as \\|)"
	}
	return ""
}
