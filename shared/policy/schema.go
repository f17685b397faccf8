package policy

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// SchemaID is the $id of the configuration's JSON Schema.
const SchemaID = "https://github.com/sluice-rl/sluice/schemas/plugin-config.json"

// JSONSchema returns the JSON Schema (draft 2020-12) of the plugin
// configuration, for editors and for validating configurations outside
// Sluice. It is built from the same field lists the parser accepts.
//
// The schema checks structure, types, ranges and name syntax; a few rules
// span several fields and only Parse checks them: burst >= the rate,
// fixed_cost and default_cost <= burst, rule and policy names unique,
// key sources distinct after lower-casing header names. A configuration the
// schema accepts may therefore still be refused by Parse, never the reverse
// for the fields the schema describes.
func JSONSchema() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(schemaDoc()); err != nil { // unreachable: the document is built from plain values
		return []byte("{}\n")
	}
	return b.Bytes()
}

type obj = map[string]any

// Patterns (ECMA-262, as JSON Schema requires).
const (
	namePattern      = `^[A-Za-z0-9_.-]{1,64}$`
	headerNameChars  = "[!#$%&'*+.^_`|~0-9A-Za-z-]"
	headerNameRe     = headerNameChars + `{1,256}`
	queryNameRe      = `[^\x00-\x20\x7f&=#]{1,256}`
	claimNameRe      = `[^\x00-\x20\x7f]{1,256}`
	keySourcePattern = `^(ip:address|path|method|host|header:` + headerNameRe + `|query:` + queryNameRe + `|jwt:` + claimNameRe + `)$`
	matchKeyPattern  = `^(path_prefix|ip:address|path|method|host|header:` + headerNameRe + `|query:` + queryNameRe + `|jwt:` + claimNameRe + `)$`
	costPattern      = `^(fixed|header:` + headerNameRe + `|query:` + queryNameRe + `)$`
)

// schemaProperties lists, per object of the configuration, the properties
// the schema describes; schema_test checks them against the parser's field
// lists so the two cannot drift apart.
func schemaProperties() map[string]obj {
	modeSchema := obj{"type": "string", "enum": []string{string(ModeEnforce), string(ModeShadow)}}
	rate := func(desc string) obj {
		return obj{"type": "number", "exclusiveMinimum": 0, "description": desc}
	}
	cost := func(desc string) obj {
		return obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxCost, "default": 1, "description": desc}
	}
	return map[string]obj{
		"config": {
			"mode": withDesc(modeSchema, "Default mode of every rule: enforce rejects requests over the limit, shadow only reports.", ModeEnforce),
			"policies": obj{"type": "array", "minItems": 1, "items": obj{"$ref": "#/$defs/policy"},
				"description": "Named groups of rules. Every policy applies; within a policy the first matching rule applies."},
			"rules": obj{"type": "array", "minItems": 1, "items": obj{"$ref": "#/$defs/rule"},
				"description": `Shorthand for "policies": [{"name": "default", "rules": [...]}]. Not together with policies.`},
			"reject_status": obj{"type": "integer", "minimum": 400, "maximum": 599, "default": DefaultRejectStatus,
				"description": "HTTP status of the local reply sent when a request is rejected."},
			"response_headers": obj{"type": "boolean", "default": true,
				"description": "Whether RateLimit-* fields are added to responses."},
			"shadow_header": obj{"type": "string", "pattern": "^" + headerNameRe + "$", "default": DefaultShadowHeader,
				"description": "Request header added upstream when a shadow rule would have rejected the request."},
			"xff_trusted_hops": obj{"type": "integer", "minimum": 0, "maximum": MaxTrustedHops, "default": 0,
				"description": "How many trusted proxies in front of Envoy append to X-Forwarded-For; 0 ignores the header."},
			"telemetry": obj{"$ref": "#/$defs/telemetry"},
		},
		"telemetry": {
			"cluster":   obj{"type": "string", "pattern": `^[\x21-\x7e]+$`, "description": "Envoy cluster of the Sluice admin that receives the reports."},
			"authority": obj{"type": "string", "pattern": `^[\x21-\x7e]+$`, "default": DefaultTelemetryAuthority, "description": ":authority of the report requests."},
			"path":      obj{"type": "string", "pattern": `^/[\x21-\x7e]*$`, "default": DefaultTelemetryPath, "description": "Path of the admin's ingestion endpoint."},
			"interval_ms": obj{"type": "integer", "minimum": MinTelemetryInterval, "maximum": MaxTelemetryInterval, "default": DefaultTelemetryInterval,
				"description": "Milliseconds between two reports of one worker VM."},
			"token": obj{"type": "string", "pattern": `^[\x21-\x7e]+$`,
				"description": "The admin's telemetry token, sent as a bearer token. Never logged. Prefer token_env: a token here is stored in every policy version (the admin masks it). Exactly one of token and token_env."},
			"token_env": obj{"type": "string", "pattern": `^[A-Za-z_][A-Za-z0-9_]{0,` + strconv.Itoa(MaxEnvNameLen-1) + `}$`,
				"description": "Name of the VM environment variable holding the telemetry token (Envoy: vm_config.environment_variables; Istio: vmConfig.env). Exactly one of token and token_env."},
			"top_n": obj{"type": "integer", "minimum": 1, "maximum": MaxTelemetryTopN, "default": DefaultTelemetryTopN,
				"description": "The most buckets per report (the hottest touched since the last report)."},
			"timeout_ms": obj{"type": "integer", "minimum": 1, "maximum": MaxTelemetryInterval - 1, "default": DefaultTelemetryTimeout,
				"description": "Timeout of one report; must be less than interval_ms (checked only by the parser, like the 1024-byte limit of the strings here)."},
		},
		"policy": {
			"name":  obj{"type": "string", "pattern": namePattern, "description": "Unique policy name."},
			"rules": obj{"type": "array", "minItems": 1, "items": obj{"$ref": "#/$defs/rule"}, "description": "Tried in order; the first whose match holds applies."},
		},
		"rule": {
			"name": obj{"type": "string", "pattern": namePattern,
				"description": "Unique across all policies: it names the rule in headers, metrics and logs and keys its buckets."},
			"limit_keys": obj{"type": "array", "minItems": 1, "uniqueItems": true, "items": obj{"$ref": "#/$defs/keySource"},
				"description": "What is limited: each distinct combination of these values gets its own bucket."},
			"match": obj{"type": "object", "propertyNames": obj{"pattern": matchKeyPattern},
				"additionalProperties": obj{"type": "string", "minLength": 1},
				"description":          "Conditions that must all hold for the rule to apply: a key source equals the value, or path_prefix."},
			"algorithm":        obj{"type": "string", "enum": algorithms, "description": "The limiting algorithm."},
			"algorithm_config": obj{"$ref": "#/$defs/tokenBucket"},
			"mode":             withDesc(modeSchema, "This rule's mode; overrides the top-level mode.", nil),
			"max_keys": obj{"type": "integer", "minimum": 0, "maximum": MaxMaxKeys, "default": DefaultMaxKeys,
				"description": "The most shared-data keys (distinct limit-key values) the rule's buckets may use; 0 for no bound."},
			"telemetry_identity": obj{"type": "string", "enum": []string{IdentityMasked, IdentityClear}, "default": IdentityMasked,
				"description": "How telemetry shows this rule's header: and jwt: key values: masked (default) or clear."},
		},
		"tokenBucket": {
			"tokens_per_second": rate("Steady refill rate (tokens per second). Exactly one of tokens_per_second and rps."),
			"rps":               rate("Alias of tokens_per_second."),
			"burst": obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxBurst,
				"description": "Bucket capacity; must be >= tokens_per_second."},
			"cost_source": obj{"type": "string", "pattern": costPattern, "default": "fixed",
				"description": `Where a request's cost comes from: "fixed", "header:<name>" or "query:<name>".`},
			"fixed_cost":   cost("Cost of every request when cost_source is fixed; <= burst."),
			"default_cost": cost("Cost when the cost header or query value is absent or unusable; <= burst."),
		},
	}
}

func withDesc(s obj, desc string, def any) obj {
	out := obj{"description": desc}
	for k, v := range s {
		out[k] = v
	}
	if def != nil {
		out["default"] = def
	}
	return out
}

func schemaDoc() obj {
	props := schemaProperties()
	closed := func(name string, required []string, extra obj) obj {
		o := obj{"type": "object", "additionalProperties": false, "properties": props[name]}
		if len(required) > 0 {
			o["required"] = required
		}
		for k, v := range extra {
			o[k] = v
		}
		return o
	}
	top := closed("config", nil, obj{
		"oneOf": []obj{{"required": []string{"rules"}}, {"required": []string{"policies"}}},
	})
	top["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	top["$id"] = SchemaID
	top["title"] = "Sluice plugin configuration"
	top["description"] = "The proxy-wasm plugin configuration of the Sluice rate limiter (docs/configuration.md). " +
		"Checked here: structure, types, ranges and names. Checked only by the filter's parser: burst >= rate, " +
		"costs <= burst, unique rule and policy names."
	top["$defs"] = obj{
		"policy": closed("policy", []string{"name", "rules"}, nil),
		"rule":   closed("rule", []string{"name", "limit_keys", "algorithm", "algorithm_config"}, nil),
		"telemetry": closed("telemetry", []string{"cluster"}, obj{
			"oneOf": []obj{{"required": []string{"token"}}, {"required": []string{"token_env"}}},
		}),
		"tokenBucket": closed("tokenBucket", []string{"burst"}, obj{
			"oneOf": []obj{{"required": []string{"tokens_per_second"}}, {"required": []string{"rps"}}},
		}),
		"keySource": obj{"type": "string", "pattern": keySourcePattern,
			"description": `"ip:address", "header:<name>", "query:<name>", "jwt:<claim>", "path", "method" or "host".`,
			"examples":    []string{"ip:address", "header:x-api-key", "jwt:sub", "query:api_key", "path", "method", "host"}},
	}
	return top
}

// schemaObjects names the parser's field list for each object the schema
// describes (used by the drift test).
func schemaObjects() map[string][]string {
	return map[string][]string{
		"config":      configFields,
		"policy":      policyFields,
		"rule":        ruleFields,
		"tokenBucket": tokenBucketFields,
		"telemetry":   telemetryFields,
	}
}
