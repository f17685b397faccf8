package policy

import (
	"bytes"
	"encoding/json"
	"sort"
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
	metadataKeyRe    = `([^\x00-\x20\x7f:.\[\]]+|\[[^\x00-\x20\x7f\[\]]+\])`
	metadataRe       = `metadata:[^\x00-\x20\x7f:]+:` + metadataKeyRe + `(\.` + metadataKeyRe + `){0,7}`
	keySourcePattern = `^(ip:address|ip:network(:[0-9]{1,2}:[0-9]{1,3})?|peer:principal|path|method|host|route|cluster|connection|all|header:` + headerNameRe + `|query:` + queryNameRe + `|jwt:` + claimNameRe + `|cookie:` + headerNameRe + `|` + metadataRe + `)$`
	matchKeyPattern  = `^(path_prefix|ip:address|peer:principal|path|method|host|route|cluster|header:` + headerNameRe + `|query:` + queryNameRe + `|jwt:` + claimNameRe + `|cookie:` + headerNameRe + `|` + metadataRe + `)$`
	costPattern      = `^(fixed|header:` + headerNameRe + `|query:` + queryNameRe + `|` + metadataRe + `)$`
	// responseCostPattern: token_bucket and quota also read a cost from
	// the response (quota.go).
	responseCostPattern = `^(fixed|header:` + headerNameRe + `|query:` + queryNameRe + `|` + metadataRe + `|response_header:` + headerNameRe + `|response_trailer:` + headerNameRe + `|response_status:` + statusListRe + `|response_grpc_status:` + grpcListRe + `|response_json:` + jsonPathsRe + `|response_bytes)$`
	statusRe            = `[1-5]([0-9][0-9]|[xX][xX])`
	statusListRe        = statusRe + `(,` + statusRe + `)*`
	grpcNameRe          = `(ok|cancelled|unknown|invalid_argument|deadline_exceeded|not_found|already_exists|permission_denied|resource_exhausted|failed_precondition|aborted|out_of_range|unimplemented|internal|unavailable|data_loss|unauthenticated)`
	grpcListRe          = grpcNameRe + `(,` + grpcNameRe + `)*`
	jsonKeyRe           = `[!#-*,\-/-\[\]-{}~]+` // printable ASCII but space, quote, backslash, and '.', '+', '|' (between keys)
	jsonPathRe          = jsonKeyRe + `(\.` + jsonKeyRe + `)*`
	jsonTermRe          = jsonPathRe + `(\|` + jsonPathRe + `)*`
	jsonPathsRe         = jsonTermRe + `(\+` + jsonTermRe + `)*`
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
	responseCost := func(capacity string) obj {
		return obj{"type": "string", "pattern": responseCostPattern, "default": "fixed",
			"description": `Where a request's cost comes from: "fixed", "header:<name>", "query:<name>", "metadata:<namespace>:<key>", or the response: "response_header:<name>", "response_trailer:<name>" (admitted while the ` + capacity + ` is not used up, charged when the response arrives), "response_status:<statuses>" (fixed_cost charged for each response with one of the statuses, such as "response_status:401,403" or "response_status:5xx"), "response_grpc_status:<codes>" (the same for a gRPC call's status, such as "response_grpc_status:unauthenticated"), "response_json:<path>" (the number at a path of the JSON body or its server-sent events, such as "response_json:usage.total_tokens"; "+" sums terms, "|" gives a term alternatives, the first found counting; charged when the body ends), "response_bytes" (the bytes of the response body, counted as it passes, charged when it ends).`}
	}
	maxDebt := func(capacity string) obj {
		return obj{"type": "number", "minimum": 0, "maximum": MaxBurst,
			"description": "With a response cost_source only: how far beyond the " + capacity + " a reported cost may go (default the " + capacity + "); later requests are refused until it is paid back."}
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
			"reject_grpc_status": obj{"type": "string", "enum": grpcCodes[1:], "default": GRPCCodeName(DefaultRejectGRPCStatus),
				"description": "gRPC status a gRPC client receives when a limit rule rejects its call (Envoy answers gRPC requests with HTTP 200 and grpc-status)."},
			"response_headers": obj{"type": "boolean", "default": true,
				"description": "Whether RateLimit-* fields are added to responses."},
			"legacy_headers": obj{"enum": []any{false, true, "ratelimit", "x-ratelimit"}, "default": false,
				"description": `Which older fields are also sent, besides the draft-10 RateLimit and RateLimit-Policy fields: true (or "ratelimit") RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset; "x-ratelimit" X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset. Either costs three header writes more per allowed request.`},
			"shadow_header": obj{"type": "string", "pattern": "^" + headerNameRe + "$", "default": DefaultShadowHeader,
				"description": "Request header added upstream when a shadow rule would have rejected the request."},
			"xff_trusted_hops": obj{"type": "integer", "minimum": 0, "maximum": MaxTrustedHops, "default": 0,
				"description": "How many trusted proxies in front of Envoy append to X-Forwarded-For; 0 ignores the header."},
			"telemetry": obj{"$ref": "#/$defs/telemetry"},
			"fleet":     obj{"$ref": "#/$defs/fleet"},
			"resets": obj{"type": "array", "maxItems": MaxResets, "items": obj{"$ref": "#/$defs/reset"},
				"description": "Identities whose stored state the filter forgets, each once per Envoy process. Written by the admin's reset command into the configuration it pushes; not part of a policy."},
			"reject_body":         withDesc(rejectBody, "Body of every limit rule's rejections instead of the filter's JSON (a rule's own reject_body wins).", nil),
			"reject_headers":      withDesc(rejectHeadersSchema(), `Fields of your own sent with every limit rule's rejections, beside the filter's, such as {"x-local-rate-limit": "true"} (a rule's own reject_headers wins).`, nil),
			"reject_content_type": withDesc(rejectContentType, "Content type of reject_body; default application/json for a JSON body, text/plain; charset=utf-8 otherwise, none for an empty body.", nil),
		},
		"fleet": fleetSchema(),
		"reset": {
			"id":   obj{"type": "string", "pattern": namePattern, "description": "Unique in the list: each Envoy process applies a reset once, by its id."},
			"rule": obj{"type": "string", "pattern": namePattern, "description": "The rule whose state for the identity is forgotten: a local limit rule other than concurrency."},
			"key":  obj{"type": "string", "minLength": 1, "maxLength": MaxOverrideKey, "description": "The identity, written as an override's key."},
			"all":  obj{"type": "boolean", "enum": []any{true}, "description": "Instead of key: every identity of the rule starts over (bounded storage only: max_keys above 0)."},
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
				"properties":           obj{"path_prefix": obj{"type": "string", "minLength": 1, "description": "The request path starts with this string."}},
				"additionalProperties": obj{"$ref": "#/$defs/condition"},
				"description":          "Conditions that must all hold for the rule to apply, one per key source: the exact value, or an object with one operator."},
			"algorithm": obj{"type": "string", "enum": algorithms, "description": "The limiting algorithm (limit rules only)."},
			"action": obj{"type": "string", "enum": actions, "default": ActionLimit,
				"description": "limit: the algorithm limits matching requests; exempt: a matching request is limited by no rule of any policy; unlimited: a matching request is not limited by this policy (its later rules are not tried), the other policies apply; deny: a matching request is rejected at once with deny_status."},
			"deny_status": obj{"type": "integer", "minimum": 200, "maximum": 599, "default": DefaultDenyStatus,
				"description": "HTTP status of a deny rule's rejection (deny rules only)."},
			"limit_headers": obj{"type": "object", "additionalProperties": false, "minProperties": 1,
				"properties": obj{
					"limit":     obj{"type": "string", "pattern": "^" + headerNameRe + "$", "description": "Header the rule's limit (burst, or window limit) is sent as."},
					"remaining": obj{"type": "string", "pattern": "^" + headerNameRe + "$", "description": "Header the rule's whole tokens left are sent as."},
					"reset":     obj{"type": "string", "pattern": "^" + headerNameRe + "$", "description": "Header the seconds until the rule's state is whole again are sent as."},
				},
				"description": "Names under which this limit rule's own numbers are sent on the responses of the requests it applies to (allowed, and its own rejections), besides the RateLimit fields of the most restrictive rule; rules of different policies need different names."},
			"reject_status": obj{"type": "integer", "minimum": 400, "maximum": 599,
				"description": "HTTP status of this limit rule's rejections instead of the top-level reject_status (limit rules only)."},
			"overrides": obj{"type": "array", "items": obj{"$ref": "#/$defs/override"},
				"description": "Per-identity limits of a limit rule: the identity key (limit_keys values joined by |) gets these limits instead of the rule's; unique keys, looked up in a hash table."},
			"algorithm_config": obj{"type": "object",
				"description": "The algorithm's parameters: tokenBucket, window (fixed_window, sliding_window), rollingWindow or quota, chosen by algorithm."},
			"mode":                withDesc(modeSchema, "This rule's mode; overrides the top-level mode.", nil),
			"reject_body":         withDesc(rejectBody, "Body of this rule's rejections (limit and deny rules) instead of the top-level reject_body or the filter's JSON.", nil),
			"reject_headers":      withDesc(rejectHeadersSchema(), "Fields of your own sent with this rule's rejections (limit and deny rules) instead of the top-level reject_headers; {} sends none.", nil),
			"reject_content_type": withDesc(rejectContentType, "Content type of this rule's reject_body; default application/json for a JSON body, text/plain; charset=utf-8 otherwise, none for an empty body.", nil),
			"shadow_mark": obj{"type": "boolean", "default": true,
				"description": "Shadow mode only: true names the rule in shadow_header when it would have refused; false only counts and logs, and leaves the upstream request as the client sent it."},
			"enforce_percent": obj{"type": "number", "minimum": 0, "maximum": 100, "default": 100,
				"description": "Gradual enforcement (limit rules in enforce mode, not keyed by all alone): the rule refuses only this percentage of its identities, chosen by a hash of the identity that every Envoy shares; the others are treated as in shadow mode."},
			"max_keys": obj{"type": "integer", "minimum": 0, "maximum": MaxMaxKeys, "default": DefaultMaxKeys,
				"description": "The most identities (distinct limit-key values) whose buckets the rule keeps at once, four to a shared-data key; 0 for one key per identity, without bound."},
			"telemetry_identity": obj{"type": "string", "enum": []string{IdentityMasked, IdentityClear}, "default": IdentityMasked,
				"description": "How telemetry shows this rule's header:, jwt:, query: and metadata: key values: masked (default) or clear."},
			"scope": obj{"type": "string", "enum": []string{ScopeLocal, ScopeGlobal}, "default": ScopeLocal,
				"description": "local: the limit holds per Envoy process; global: across every process sharing the fleet backend (needs fleet)."},
			"from":     obj{"type": "string", "pattern": rfc3339Pattern, "description": "RFC 3339 time from which the rule applies (inclusive); before it the rule is passed over and the next rule of its policy is tried."},
			"until":    obj{"type": "string", "pattern": rfc3339Pattern, "description": "RFC 3339 time at which the rule ends (exclusive); from then on it is passed over, with no push."},
			"schedule": scheduleSchema("The days and times of day the rule applies, week after week, in a time zone; outside, the next rule of its policy is tried. until at or before from crosses midnight."),
		},
		"tokenBucket": {
			"tokens_per_second": rate("Steady refill rate (tokens per second). Exactly one of tokens_per_second and rps."),
			"rps":               rate("Alias of tokens_per_second."),
			"burst": obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxBurst,
				"description": "Bucket capacity; must be >= tokens_per_second."},
			"cost_source":  responseCost("burst"),
			"fixed_cost":   cost("Cost of every request when cost_source is fixed (of every counted response with response_status: or response_grpc_status:); <= burst."),
			"default_cost": cost("Cost when the cost header or query value is absent or unusable; <= burst."),
			"max_delay_ms": obj{"type": "integer", "minimum": 0, "maximum": MaxDelayMS, "default": 0,
				"description": "Delayed admission: a request that would wait at most this many milliseconds for its tokens reserves them and is held until then instead of rejected; 0 = off."},
			"max_debt": maxDebt("burst"),
			"block_seconds": obj{"type": "integer", "minimum": 0, "maximum": MaxBlockSeconds, "default": 0,
				"description": "Once the rule refuses an identity (its bucket empty), refuse it for this many seconds more, whatever it sends; 0 = off. Not with max_delay_ms. On a global rule the rate limit service keeps the block for the whole fleet."},
		},
		"quota": {
			"limit": obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxBurst,
				"description": "The most requests (or cost) admitted per calendar period."},
			"period": obj{"type": "string", "enum": quotaPeriods,
				"description": "The calendar period: hour, day, week (starting Monday 00:00, ISO 8601) or month, in time_zone; the use resets at its start."},
			"time_zone": obj{"type": "string", "pattern": `^[A-Za-z0-9_+/-]{1,64}$`, "default": "UTC", "examples": []string{"Europe/Berlin", "America/New_York"},
				"description": "IANA time zone of the calendar (daylight-saving changes included)."},
			"cost_source":  responseCost("limit"),
			"fixed_cost":   cost("Cost of every request when cost_source is fixed (of every counted response with response_status: or response_grpc_status:); <= limit."),
			"default_cost": cost("Cost when the cost value is absent or unusable (or the response reports none); <= limit."),
			"max_debt":     maxDebt("limit"),
		},
		"concurrency": {
			"limit": obj{"type": "integer", "minimum": 1, "maximum": MaxConcurrency,
				"description": "The most requests of one identity in flight at once; a request holds its place until its stream ends."},
			"max_request_seconds": obj{"type": "integer", "minimum": 1, "maximum": MaxRequestSeconds, "default": DefaultMaxRequestSeconds,
				"description": "At least your longest request: a place not given back (a crashed VM) returns within twice this, and a stream that lasts longer may stop counting."},
		},
		"window":        windowProperties(false, cost),
		"rollingWindow": windowProperties(true, cost),
		"override": {
			"key": obj{"type": "string", "minLength": 1, "description": "The identity as the rule builds it: its limit_keys values in order, joined by |, with \\, | and # inside a value escaped by a backslash."},
			"algorithm_config": obj{"type": "object", "minProperties": 1, "additionalProperties": false,
				"properties": obj{
					"tokens_per_second": rate("token_bucket: the identity's refill rate."),
					"rps":               rate("token_bucket: alias of tokens_per_second."),
					"burst":             obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxBurst, "description": "token_bucket: the identity's bucket capacity."},
					"limit":             obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxBurst, "description": "Windows and quota: the identity's limit per window or calendar period (a quota's period and time_zone are the rule's, shared by every identity)."},
					"max_per_period":    obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxBurst, "description": "rolling_window: the identity's cap per period."},
					"block_seconds":     obj{"type": "integer", "minimum": 0, "maximum": MaxBlockSeconds, "description": "token_bucket: how long the identity stays refused once the rule refuses it; 0: never blocked."},
				},
				"description": "The limits that differ from the rule's; the rest (costs, window lengths) is the rule's."},
			"from":     obj{"type": "string", "pattern": rfc3339Pattern, "description": "RFC 3339 time from which the override applies (inclusive); before it the identity has the rule's limits."},
			"until":    obj{"type": "string", "pattern": rfc3339Pattern, "description": "RFC 3339 time at which the override ends (exclusive); from then on the identity has the rule's limits again, with no push."},
			"schedule": scheduleSchema("The days and times of day the override applies, week after week, in a time zone, within from and until; outside, the identity has the rule's limits. until at or before from crosses midnight."),
		},
	}
}

// conditionSchema describes one condition of a match: the exact value, or
// an object with one operator (match.go).
func conditionSchema() obj {
	str := obj{"type": "string", "minLength": 1}
	list := func(desc string) obj {
		return obj{"type": "array", "minItems": 1, "uniqueItems": true, "items": str, "description": desc}
	}
	return obj{
		"oneOf": []obj{
			{"type": "string", "minLength": 1, "description": "The value equals this string exactly."},
			{"type": "object", "additionalProperties": false, "minProperties": 1, "maxProperties": 1,
				"properties": obj{
					"exact":   withDesc(str, "The value equals this string.", nil),
					"prefix":  withDesc(str, "The value starts with this string.", nil),
					"suffix":  withDesc(str, "The value ends with this string.", nil),
					"regex":   withDesc(str, "An RE2 regular expression matching the value (anywhere unless anchored with ^ and $).", nil),
					"in":      list("The value is one of these strings."),
					"cidr":    list(`The value is an IP address in one of these blocks, e.g. "10.0.0.0/8", "2001:db8::/32".`),
					"present": obj{"type": "boolean", "description": "true: the value is present and non-empty; false: it is absent or empty."},
					"not":     obj{"$ref": "#/$defs/condition", "description": "The condition does not hold."},
				}},
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
		"oneOf":             []obj{{"required": []string{"rules"}}, {"required": []string{"policies"}}},
		"dependentRequired": replyDependency,
	})
	top["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	top["$id"] = SchemaID
	top["title"] = "Sluice plugin configuration"
	top["description"] = "The proxy-wasm plugin configuration of the Sluice rate limiter (docs/configuration.md). " +
		"Checked here: structure, types, ranges and names. Checked only by the filter's parser: burst >= rate, " +
		"costs <= burst (or limit, max_per_period), period_seconds dividing window_seconds into at most 60 periods, " +
		"max_per_period <= limit, unique rule and policy names, regular expressions and CIDR blocks, override keys " +
		"(one value per limit key, unique) and the limits an override's algorithm_config may set for the rule's algorithm."
	top["$defs"] = obj{
		"policy": closed("policy", []string{"name", "rules"}, nil),
		"rule": closed("rule", []string{"name"}, obj{
			"dependentRequired": replyDependency,
			"oneOf": []obj{
				{"properties": obj{"action": obj{"enum": []string{ActionLimit}}, "deny_status": never},
					"required": []string{"limit_keys", "algorithm", "algorithm_config"},
					"oneOf": []obj{
						algorithmAlternative("tokenBucket", AlgorithmTokenBucket),
						algorithmAlternative("window", AlgorithmFixedWindow, AlgorithmSlidingWindow),
						algorithmAlternative("rollingWindow", AlgorithmRollingWindow),
						algorithmAlternative("quota", AlgorithmQuota),
						algorithmAlternative("concurrency", AlgorithmConcurrency),
					}},
				actionAlternative(ActionExempt),
				actionAlternative(ActionUnlimited),
				actionAlternative(ActionDeny),
			},
		}),
		"condition": conditionSchema(),
		"override":  closed("override", []string{"key", "algorithm_config"}, nil),
		"telemetry": closed("telemetry", []string{"cluster"}, obj{
			"oneOf": []obj{{"required": []string{"token"}}, {"required": []string{"token_env"}}},
		}),
		"fleet": closed("fleet", []string{"cluster"}, nil),
		"reset": closed("reset", []string{"id", "rule"}, obj{"oneOf": []obj{{"required": []string{"key"}}, {"required": []string{"all"}}}}),
		"tokenBucket": closed("tokenBucket", []string{"burst"}, obj{
			"oneOf": []obj{{"required": []string{"tokens_per_second"}}, {"required": []string{"rps"}}},
		}),
		"window":        closed("window", []string{"limit", "window_seconds"}, nil),
		"rollingWindow": closed("rollingWindow", []string{"limit", "window_seconds", "period_seconds"}, nil),
		"quota":         closed("quota", []string{"limit", "period"}, nil),
		"concurrency":   closed("concurrency", []string{"limit"}, nil),
		"keySource": obj{"type": "string", "pattern": keySourcePattern,
			"description": `"ip:address", "ip:network", "peer:principal", "header:<name>", "query:<name>", "jwt:<claim>", "cookie:<name>", "metadata:<namespace>:<key>", "path", "method", "host", "route", "cluster" (the upstream cluster), "connection" (a bucket per downstream connection) or "all" (one bucket for every request).`,
			"examples":    []string{"ip:address", "peer:principal", "header:x-api-key", "jwt:sub", "query:api_key", "cookie:session", "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub", "path", "method", "host", "route", "cluster", "connection", "all"}},
	}
	return top
}

// schemaObjects names the parser's field list for each object the schema
// describes (used by the drift test).
func schemaObjects() map[string][]string {
	return map[string][]string{
		"config":        configFields,
		"policy":        policyFields,
		"rule":          ruleFields,
		"tokenBucket":   tokenBucketFields,
		"window":        windowFields,
		"rollingWindow": rollingWindowFields,
		"quota":         quotaFields,
		"concurrency":   concurrencyFields,
		"telemetry":     telemetryFields,
		"fleet":         fleetFields,
		"override":      overrideFields,
		"reset":         resetFields,
	}
}

// fleetSchema describes the top-level "fleet" object (fleet.go).
func fleetSchema() obj {
	printable := `^[\x21-\x7e]+$`
	ms := func(lo, hi, def int, desc string) obj {
		return obj{"type": "integer", "minimum": lo, "maximum": hi, "default": def, "description": desc}
	}
	return obj{
		"cluster":   obj{"type": "string", "pattern": printable, "description": "Envoy cluster (HTTP/2) of the rate limit service (Sluice admin or envoyproxy/ratelimit)."},
		"authority": obj{"type": "string", "pattern": printable, "default": DefaultFleetAuthority, "description": ":authority of the RLS calls."},
		"domain":    obj{"type": "string", "pattern": printable, "default": DefaultFleetDomain, "description": "RateLimitRequest domain."},
		"timeout_ms": ms(1, MaxFleetTimeout, DefaultFleetTimeout,
			"Timeout of one RLS call, also the longest a request waits for a lease; less than sync_interval_ms (checked by the parser)."),
		"sync_interval_ms": ms(MinFleetSyncInterval, MaxFleetSyncInterval, DefaultFleetSyncInterval, "Milliseconds between the lease syncs of one Envoy process."),
		"lease_min":        ms(1, MaxLease, DefaultLeaseMin, "Smallest lease (tokens) asked for one key; <= lease_max."),
		"lease_max":        ms(1, MaxLease, DefaultLeaseMax, "Largest lease (tokens) held for one key by one process."),
		"lease_ttl_ms":     ms(1, MaxLeaseTTL, DefaultLeaseTTL, "Leased tokens unspent this long after their grant are dropped; more than twice sync_interval_ms."),
		"on_backend_down": obj{"type": "string", "enum": []string{BackendDownLocalShare, BackendDownAllow, BackendDownDeny}, "default": BackendDownLocalShare,
			"description": "After leases expire with the backend unreachable: local_share enforces rate/N and burst/N per process, allow admits, deny rejects."},
		"fleet_size": ms(0, MaxFleetSize, 0, "N for local_share; 0 uses the fleet size the backend last reported (x-sluice-fleet-size), else 1."),
	}
}

// A custom rejection reply (reply.go).
var (
	rejectBody        = obj{"type": "string", "maxLength": MaxRejectBody}
	rejectContentType = obj{"type": "string", "minLength": 1, "maxLength": maxContentType,
		"pattern": `^[!#$%&'*+.^_|~0-9A-Za-z` + "`" + `-]+/[!#$%&'*+.^_|~0-9A-Za-z` + "`" + `-]+( *;([\x20-\x7e]*[\x21-\x7e])?)?$`}
	replyDependency = obj{"reject_content_type": []string{"reject_body"}}
)

// rejectHeadersSchema is "reject_headers" (reject_headers.go): header names
// (any case, none the filter or Envoy sets) to printable ASCII values.
func rejectHeadersSchema() obj {
	reserved := make([]string, 0, len(reservedRejectHeaders))
	for name := range reservedRejectHeaders {
		reserved = append(reserved, name)
	}
	sort.Strings(reserved)
	return obj{"type": "object", "maxProperties": MaxRejectHeaders,
		"propertyNames":        obj{"pattern": "^" + headerNameRe + "$", "not": obj{"enum": reserved}},
		"additionalProperties": obj{"type": "string", "minLength": 1, "maxLength": maxRejectHeaderValue, "pattern": `^[\x21-\x7e]([\t\x20-\x7e]*[\x21-\x7e])?$`},
	}
}

// never is a schema no value satisfies: the property must be absent.
var never = obj{"not": obj{}}

// actionAlternative is the shape of an exempt or deny rule: no algorithm
// and nothing that configures one (deny_status for deny only).
func actionAlternative(action string) obj {
	props := obj{"action": obj{"enum": []string{action}}}
	for _, f := range []string{"algorithm", "algorithm_config", "max_keys", "scope", "overrides", "reject_status", "limit_headers"} {
		props[f] = never
	}
	if action != ActionDeny {
		props["deny_status"] = never
	}
	if RejectsNothing(action) {
		props["reject_body"], props["reject_content_type"], props["reject_headers"] = never, never, never
	}
	return obj{"required": []string{"action"}, "properties": props}
}

// algorithmAlternative ties algorithm names to the $defs entry describing
// their algorithm_config.
func algorithmAlternative(def string, names ...string) obj {
	return obj{"properties": obj{
		"algorithm":        obj{"enum": names},
		"algorithm_config": obj{"$ref": "#/$defs/" + def},
	}}
}

// windowProperties describes the algorithm_config of the windowed
// algorithms (window.go).
func windowProperties(rolling bool, cost func(string) obj) obj {
	props := obj{
		"limit": obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxBurst,
			"description": "The most requests (or cost) admitted per window."},
		"window_seconds": obj{"type": "integer", "minimum": 1, "maximum": MaxWindowSeconds,
			"description": "Window length in whole seconds; fixed windows are aligned to the Unix epoch."},
		"cost_source": obj{"type": "string", "pattern": costPattern, "default": "fixed",
			"description": `Where a request's cost comes from: "fixed", "header:<name>", "query:<name>" or "metadata:<namespace>:<key>".`},
		"fixed_cost":   cost("Cost of every request when cost_source is fixed; <= limit (and max_per_period)."),
		"default_cost": cost("Cost when the cost header or query value is absent or unusable; <= limit (and max_per_period)."),
	}
	if rolling {
		props["period_seconds"] = obj{"type": "integer", "minimum": 1, "maximum": MaxWindowSeconds,
			"description": "Sub-period in whole seconds: divides window_seconds into at most 60 periods; the allowance is recalculated every period."}
		props["max_per_period"] = obj{"type": "number", "exclusiveMinimum": 0, "maximum": MaxBurst,
			"description": "Optional cap on the use per period (<= limit): limits the rate as well as the window total."}
	}
	return props
}

// rfc3339Pattern is the shape of an RFC 3339 time as the parser reads it
// (time.RFC3339Nano): the parser also checks the values.
const rfc3339Pattern = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`

// scheduleSchema is a rule's or an override's "schedule".
func scheduleSchema(description string) obj {
	return obj{"type": "object", "additionalProperties": false, "minProperties": 1,
		"description": description,
		"properties": obj{
			"days": obj{"type": "array", "minItems": 1, "uniqueItems": true, "items": obj{"type": "string", "enum": weekdays},
				"description": "The days a window starts on; default every day."},
			"from":      obj{"type": "string", "pattern": `^([01][0-9]|2[0-3]):[0-5][0-9]$`, "default": "00:00", "description": "The time of day a window starts (HH:MM)."},
			"until":     obj{"type": "string", "pattern": `^(([01][0-9]|2[0-3]):[0-5][0-9]|24:00)$`, "default": "24:00", "description": "The time of day a window ends (HH:MM, exclusive); at or before from, the next day."},
			"time_zone": obj{"type": "string", "default": "UTC", "description": "IANA time zone of from and until (e.g. Europe/Berlin)."},
		}}
}
