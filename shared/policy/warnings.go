package policy

import (
	"strconv"
	"strings"
	"time"
)

// This file finds what is valid but almost certainly not meant: a rule no
// request can reach, an exempt rule that lifts every limit, a deny rule
// that rejects everything, a rule charged from the response whose answers
// that report nothing are almost free, a metadata source that names no
// value Envoy writes. The admin shows these beside a saved policy and
// the validate API returns them; they never refuse a configuration, since a
// blanket rule may be what an operator wants for a while.

// Warning is a finding about one rule.
type Warning struct {
	Rule    string // the rule's name (names are unique across policies)
	Message string // says what happens and what to change
}

func (w Warning) String() string { return "rule " + strconv.Quote(w.Rule) + ": " + w.Message }

// Warnings returns the configuration's findings, in rule order.
func (c *Config) Warnings() []Warning {
	var out []Warning
	for _, p := range c.Policies {
		for i := range p.Rules {
			r := &p.Rules[i]
			out = append(out, cheapDefault(r)...)
			out = append(out, metadataMistakes(r)...)
			out = append(out, unsentFields(c, r)...)
			if !appliesToEvery(r) {
				continue
			}
			out = append(out, blanket(r)...)
			for _, later := range p.Rules[i+1:] {
				out = append(out, Warning{Rule: later.Name, Message: "never applies: rule " + strconv.Quote(r.Name) +
					" before it in policy " + strconv.Quote(p.Name) + " applies to every request (it has no match, and every request has its limit keys), and within a policy the first rule that applies wins; move this rule before it, give that rule a match, or put this rule in a policy of its own"})
			}
			break // the rules after it were reported
		}
	}
	return out
}

// blanket reports an exempt, unlimited or deny rule that applies to every
// request.
func blanket(r *Rule) []Warning {
	mode := ""
	if r.Mode == ModeShadow {
		mode = " shadow"
	}
	switch r.Action {
	case ActionExempt:
		what := "no rule of any policy limits any request"
		if r.Mode == ModeShadow {
			what = "no shadow rule of any policy reports any request"
		}
		return []Warning{{Rule: r.Name, Message: "this" + mode + " exempt rule has no match, so it exempts every request: " + what + "; give it a match"}}
	case ActionUnlimited:
		return []Warning{{Rule: r.Name, Message: "this unlimited rule has no match, so its policy limits no request; give it a match"}}
	case ActionDeny:
		what := "every request is rejected with " + strconv.Itoa(r.DenyStatus)
		if r.Mode == ModeShadow {
			what = "every request is reported as denied"
		}
		return []Warning{{Rule: r.Name, Message: "this" + mode + " deny rule has no match, so " + what + "; give it a match"}}
	}
	return nil
}

// unsentFields reports limit_headers fields that never carry anything:
// with "response_headers": false no allowed response carries them, and a
// concurrency rule has no reset.
func unsentFields(c *Config, r *Rule) []Warning {
	l := r.LimitHeaders
	if l == nil {
		return nil
	}
	var out []Warning
	if !c.ResponseHeaders {
		out = append(out, Warning{Rule: r.Name, Message: `its limit_headers are sent on its rejections only: "response_headers" is false, so allowed responses carry no fields; set it to true, or remove limit_headers`})
	}
	if l.Reset != "" && r.Algorithm == AlgorithmConcurrency {
		out = append(out, Warning{Rule: r.Name, Message: "limit_headers.reset " + strconv.Quote(l.Reset) + " is always 0: requests in flight free their places when they end, not at a time; remove it"})
	}
	return out
}

// appliesToEvery reports whether r applies to every request it is tried
// on: no match conditions, and only limit keys every request has (its
// path and method, and the client address, which Envoy always knows). A
// rule for a time does not: outside it, the rules after it apply, and a
// blanket rule for a time (a maintenance window's deny) is deliberate.
func appliesToEvery(r *Rule) bool {
	if len(r.Match) > 0 || r.Timed() {
		return false
	}
	for _, k := range r.Keys {
		switch k.Kind {
		case SourcePath, SourceMethod, SourceIP:
		default:
			return false
		}
	}
	return true
}

// cheapDefaultShare is how small a default_cost may be, against the
// bucket's burst (a quota's limit), before it is reported: below a
// ten-thousandth, answers that report no cost are as good as free.
const cheapDefaultShare = 10000

// cheapDefault reports a rule charged what the response reports whose
// default_cost is tiny beside its capacity: every answer that reports
// nothing (an error, a stream without usage, a compressed body) costs
// almost nothing, so a client can make its answers report nothing and go
// nearly unlimited.
func cheapDefault(r *Rule) []Warning {
	cs, _, def := r.CostConfig()
	if !cs.FromResponse() || cs.ByStatus() {
		return nil
	}
	capacity := 0.0
	switch {
	case r.TokenBucket != nil:
		capacity = r.TokenBucket.Burst
	case r.Quota != nil:
		capacity = r.Quota.Limit
	}
	if def*cheapDefaultShare >= capacity {
		return nil
	}
	what := "burst"
	if r.Quota != nil {
		what = "limit"
	}
	return []Warning{{Rule: r.Name, Message: "default_cost " + strconv.FormatFloat(def, 'f', -1, 64) +
		" is under a ten-thousandth of its " + what + " " + strconv.FormatFloat(capacity, 'f', -1, 64) +
		": an answer that reports no cost (an error, a stream without usage, a compressed body) is charged almost nothing; set default_cost to what a typical request costs"}}
}

// shortNamespaces are filters whose metadata Envoy files under their full
// name, which a namespace written short never finds.
var shortNamespaces = map[string]bool{"jwt_authn": true, "json_to_metadata": true, "ext_authz": true}

// metadataMistakes reports metadata sources (keys, match, cost) that read
// nothing Envoy writes: a filter's short name as the namespace, or a
// single key under jwt_authn, which keeps a token's claims one level down,
// under its payload_in_metadata key.
func metadataMistakes(r *Rule) []Warning {
	var srcs []KeySource
	srcs = append(srcs, r.Keys...)
	for _, m := range r.Match {
		srcs = append(srcs, m.Source)
	}
	if cs, _, _ := r.CostConfig(); cs.Kind == CostMetadata {
		srcs = append(srcs, KeySource{Kind: SourceMetadata, Name: cs.Name})
	}
	var out []Warning
	seen := map[string]bool{}
	for _, k := range srcs {
		if k.Kind != SourceMetadata || seen[k.Name] {
			continue
		}
		seen[k.Name] = true
		path := MetadataPath(k.Name)
		ns, keys := path[2], path[3:]
		switch {
		case shortNamespaces[ns]:
			out = append(out, Warning{Rule: r.Name, Message: strconv.Quote(k.String()) + " reads namespace " + strconv.Quote(ns) +
				", which Envoy never writes: a filter's metadata is under its full name; write \"metadata:envoy.filters.http." + k.Name + "\""})
		case ns == "envoy.filters.http.jwt_authn" && len(keys) == 1:
			out = append(out, Warning{Rule: r.Name, Message: strconv.Quote(k.String()) + " reads no claim: jwt_authn keeps a token's claims under its payload_in_metadata key (" +
				"Istio's: payload); write \"metadata:envoy.filters.http.jwt_authn:<that key>." + keys[0] + "\", e.g. \"metadata:envoy.filters.http.jwt_authn:payload." + keys[0] + "\""})
		}
	}
	return out
}

// Ended reports the rules and the overrides whose until is at or before
// now (Unix nanoseconds): valid, but dead weight, since such a rule is
// passed over and such an override's identity has its rule's limits
// again. Overrides are named by position, not by key: a key may be a
// secret (an API key).
func (c *Config) Ended(now int64) []Warning {
	var out []Warning
	for _, p := range c.Policies {
		for i := range p.Rules {
			r := &p.Rules[i]
			if r.Until != 0 && r.Until <= now {
				out = append(out, Warning{Rule: r.Name, Message: "ended on " + time.Unix(0, r.Until).UTC().Format(time.RFC3339) +
					": the rule applies to no request any more; remove it"})
				continue
			}
			var ended []string
			last := int64(0)
			for j := range r.Overrides {
				if u := r.Overrides[j].Until; u != 0 && u <= now {
					ended = append(ended, "overrides["+strconv.Itoa(j)+"]")
					last = max(last, u)
				}
			}
			if len(ended) == 0 {
				continue
			}
			list := ended
			if len(list) > 5 {
				list = append(list[:5:5], "and "+strconv.Itoa(len(ended)-5)+" more")
			}
			out = append(out, Warning{Rule: r.Name, Message: strings.Join(list, ", ") + " ended (the last on " +
				time.Unix(0, last).UTC().Format(time.RFC3339) + "): those identities have the rule's limits again; remove them"})
		}
	}
	return out
}
