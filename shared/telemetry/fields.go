package telemetry

import (
	"encoding/json"
	"sort"
)

// The report's field names (docs/telemetry.md). The plugin's encoder
// writes these names and Decode accepts exactly these, so the two sides
// cannot drift apart.

// Top-level fields of a report.
const (
	FieldV              = "v"
	FieldNode           = "node"
	FieldVM             = "vm"
	FieldVMStartMS      = "vm_start_ms"
	FieldSeq            = "seq"
	FieldSentAtMS       = "sent_at_ms"
	FieldIntervalMS     = "interval_ms"     // optional (DefaultIntervalMS)
	FieldConfigHash     = "config_hash"     // optional
	FieldRules          = "rules"           // the rules' counters (RuleCounters)
	FieldBuckets        = "buckets"         // optional
	FieldReportsDropped = "reports_dropped" // optional
	FieldFleet          = "fleet"           // optional: only with global rules
)

// Fields of an entry of "rules".
const (
	RuleFieldRule               = "rule"
	RuleFieldAllowed            = "allowed"
	RuleFieldRejected           = "rejected"
	RuleFieldShadowRejected     = "shadow_rejected"
	RuleFieldFailOpen           = "fail_open"
	RuleFieldOverflowed         = "overflowed"          // optional
	RuleFieldOverflowIdentities = "overflow_identities" // optional
	RuleFieldExempted           = "exempted"            // optional
	RuleFieldDenied             = "denied"              // optional
	RuleFieldOverridden         = "overridden"          // optional
	RuleFieldResponseCharged    = "response_charged"    // optional
	RuleFieldResponseDefault    = "response_default"    // optional
	RuleFieldResponseInvalid    = "response_invalid"    // optional
	RuleFieldKeyMissing         = "key_missing"         // optional
	RuleFieldBlocked            = "blocked"             // optional
)

// Fields of an entry of "buckets".
const (
	BucketFieldRule       = "rule"
	BucketFieldIdentity   = "identity"
	BucketFieldTokens     = "tokens"
	BucketFieldBurst      = "burst"
	BucketFieldLastRefill = "last_refill"
	BucketFieldRejects    = "rejects"
	BucketFieldAlgorithm  = "algorithm" // optional: windowed rules only
)

// Fields of the "fleet" object and of an entry of its "rules".
const (
	FleetFieldBackendHealthy = "backend_healthy"
	FleetFieldSize           = "fleet_size"
	FleetFieldRules          = "rules"

	FleetRuleFieldRule           = "rule"
	FleetRuleFieldLeaseTokens    = "lease_tokens"
	FleetRuleFieldPools          = "pools"
	FleetRuleFieldFallbackActive = "fallback_active"
)

// KnownFields lists every field Decode accepts, as paths: "seq",
// "rules[].allowed", "buckets[].algorithm", "fleet.rules[].pools".
func KnownFields() []string {
	var out []string
	for _, f := range reportFields {
		out = append(out, f.name)
	}
	for _, f := range ruleFields {
		out = append(out, FieldRules+"[]."+f.name)
	}
	for _, f := range bucketFields {
		out = append(out, FieldBuckets+"[]."+f.name)
	}
	for _, f := range fleetFields {
		out = append(out, FieldFleet+"."+f.name)
	}
	for _, f := range fleetRuleFields {
		out = append(out, FieldFleet+"."+FleetFieldRules+"[]."+f.name)
	}
	return out
}

// FieldPaths lists the field paths of a JSON document in KnownFields'
// notation, sorted: what a report body holds, to compare with
// KnownFields.
func FieldPaths(body []byte) ([]string, error) {
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				seen[p] = true
				walk(p, x)
			}
		case []any:
			for _, x := range v {
				walk(prefix+"[]", x)
			}
		}
	}
	walk("", doc)
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}
