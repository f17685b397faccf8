package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/limiter"
)

const baseRule = `{"name":"r","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}`

// rules builds a config from rule objects with the top-level shorthand.
func rules(rs ...string) string { return `{"rules":[` + strings.Join(rs, ",") + `]}` }

// top builds a config with extra top-level fields and one valid rule.
func top(extra string) string { return `{` + extra + `,"rules":[` + baseRule + `]}` }

// ruleWith builds a config with one rule made of the given fields.
func ruleWith(fields string) string { return rules(`{` + fields + `}`) }

// withKeys builds a valid rule with the given limit_keys value.
func withKeys(keys string) string {
	return ruleWith(`"name":"r","limit_keys":` + keys + `,"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`)
}

// withMatch builds a valid rule with the given match value.
func withMatch(match string) string {
	return ruleWith(`"name":"r","limit_keys":["ip:address"],"match":` + match + `,"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`)
}

// withTB builds a token_bucket rule with the given algorithm_config.
func withTB(cfg string) string {
	return ruleWith(`"name":"r","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":` + cfg)
}

func policies(ps ...string) string { return `{"policies":[` + strings.Join(ps, ",") + `]}` }

func TestParseErrors(t *testing.T) {
	const tb = "rules[0].algorithm_config."
	deep := `{"rules":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`
	cases := []struct {
		name string
		in   string
		path string   // path of the (first) error
		want []string // substrings of its message
		n    int      // number of errors expected (0 means 1)
	}{
		// Malformed JSON: one error, with its location.
		{"empty", "", "", []string{"empty configuration"}, 0},
		{"blank", " \n\t", "", []string{"empty configuration"}, 0},
		{"truncated", `{"rules": [`, "", []string{"invalid JSON", "byte offset 11 (line 1, column 12)", "unexpected end"}, 0},
		{"missing colon", `{"a" 1}`, "", []string{"invalid JSON at byte offset 5 (line 1, column 6)", "after object key"}, 0},
		{"bad token line/col", "{\n  \"rules\": x\n}", "", []string{"byte offset 13 (line 2, column 12)", "invalid character 'x'"}, 0},
		{"trailing comma", `{"rules":[1,]}`, "", []string{"invalid JSON", "byte offset 12"}, 0},
		{"trailing data", `{} {}`, "", []string{"byte offset 3 (line 1, column 4)", "after top-level value", "must be a single JSON object"}, 0},
		{"a string that is not UTF-8", withMatch("{\"header:x-plan\":\"caf\xe9\"}"), "", []string{"invalid JSON at byte offset 79 (line 1, column 80)", "byte 0xe9 is not UTF-8", "save the configuration as UTF-8"}, 0},
		{"a key that is not UTF-8", "{\n\"\xd4\": 1}", "", []string{"byte offset 3 (line 2, column 2)", "byte 0xd4 is not UTF-8"}, 0},
		{"too deep", deep, "", []string{"nested more than 64 levels"}, 0},
		{"not object", `[]`, "", []string{"must be a JSON object", "got an array"}, 0},
		{"string", `"rules"`, "", []string{"must be a JSON object", "got a string"}, 0},
		{"null", `null`, "", []string{"must be a JSON object", "got null"}, 0},

		// Top level.
		{"unknown top field", top(`"colour":"red"`), "colour", []string{`unknown field "colour"`, "allowed fields here: mode, policies, rules"}, 0},
		{"typo suggestion", top(`"reject_stauts":500`), "reject_stauts", []string{`did you mean "reject_status"?`}, 0},
		{"duplicate top field", `{"mode":"enforce","mode":"shadow","rules":[` + baseRule + `]}`, "mode", []string{`duplicate field "mode"`}, 0},
		{"mode unknown", top(`"mode":"audit"`), "mode", []string{`must be "enforce" or "shadow"`, `got "audit"`}, 0},
		{"mode number", top(`"mode":1`), "mode", []string{`must be "enforce" or "shadow"`, "got a number"}, 0},
		{"reject_status low", top(`"reject_status":200`), "reject_status", []string{"200 is out of range", "from 400 to 599"}, 0},
		{"reject_status high", top(`"reject_status":600`), "reject_status", []string{"600 is out of range"}, 0},
		{"reject_status fraction", top(`"reject_status":429.5`), "reject_status", []string{"429.5 is not an integer"}, 0},
		{"reject_status string", top(`"reject_status":"429"`), "reject_status", []string{"must be an HTTP status code", "got a string"}, 0},
		{"reject_grpc_status typo", top(`"reject_grpc_status":"resource_exausted"`), "reject_grpc_status", []string{`unknown gRPC status "resource_exausted"`, `did you mean "resource_exhausted"?`}, 0},
		{"reject_grpc_status upper case", top(`"reject_grpc_status":"UNAVAILABLE"`), "reject_grpc_status", []string{`did you mean "unavailable"?`, "in lower case"}, 0},
		{"reject_grpc_status ok", top(`"reject_grpc_status":"ok"`), "reject_grpc_status", []string{`unknown gRPC status "ok"`}, 0},
		{"reject_grpc_status number", top(`"reject_grpc_status":8`), "reject_grpc_status", []string{"must be a gRPC status name", "got a number"}, 0},
		{"response_headers string", top(`"response_headers":"yes"`), "response_headers", []string{"must be true or false", "got a string"}, 0},
		{"legacy_headers number", top(`"legacy_headers":0`), "legacy_headers", []string{`must be true, false, "ratelimit" or "x-ratelimit"`, "got a number"}, 0},
		{"legacy_headers unknown prefix", top(`"legacy_headers":"X-RateLimit"`), "legacy_headers", []string{`must be true, false, "ratelimit" or "x-ratelimit"`, `got "X-RateLimit"`}, 0},
		{"shadow_header empty", top(`"shadow_header":""`), "shadow_header", []string{"name is empty"}, 0},
		{"shadow_header space", top(`"shadow_header":"x shadow"`), "shadow_header", []string{`"x shadow" contains ' '`}, 0},
		{"shadow_header pseudo", top(`"shadow_header":":path"`), "shadow_header", []string{"pseudo-headers"}, 0},
		{"shadow_header number", top(`"shadow_header":5`), "shadow_header", []string{"must be a string", "got a number"}, 0},
		{"xff negative", top(`"xff_trusted_hops":-1`), "xff_trusted_hops", []string{"-1 is out of range", "from 0 to 10"}, 0},
		{"xff too many", top(`"xff_trusted_hops":11`), "xff_trusted_hops", []string{"11 is out of range"}, 0},
		{"xff fraction", top(`"xff_trusted_hops":1.5`), "xff_trusted_hops", []string{"1.5 is not an integer"}, 0},
		{"xff string", top(`"xff_trusted_hops":"1"`), "xff_trusted_hops", []string{"must be an integer", "got a string"}, 0},
		{"policies and rules", `{"policies":[{"name":"p","rules":[` + baseRule + `]}],"rules":[{"name":"s","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
			"rules", []string{`cannot be used together with "policies"`}, 0},
		{"no rules at all", `{"mode":"enforce"}`, "", []string{"no rules", `set "rules"`}, 0},
		{"empty object", `{}`, "", []string{"no rules"}, 0},
		{"rules not array", `{"rules":{}}`, "rules", []string{"must be an array of rules", "got an object"}, 0},
		{"rules empty", `{"rules":[]}`, "rules", []string{"is empty", "at least one rule"}, 0},
		{"policies not array", `{"policies":"p"}`, "policies", []string{"must be an array of policies"}, 0},
		{"policies empty", `{"policies":[]}`, "policies", []string{"is empty", "at least one policy"}, 0},

		// Policies.
		{"policy not object", policies(`1`), "policies[0]", []string{"must be an object", "got a number"}, 0},
		{"policy missing name", policies(`{"rules":[` + baseRule + `]}`), "policies[0].name", []string{"missing", "policy needs a name"}, 0},
		{"policy bad name", policies(`{"name":"a b","rules":[` + baseRule + `]}`), "policies[0].name", []string{`"a b" contains ' '`, "A-Z a-z 0-9 _ . -"}, 0},
		{"policy name number", policies(`{"name":7,"rules":[` + baseRule + `]}`), "policies[0].name", []string{"must be a string", "got a number"}, 0},
		{"policy duplicate name", policies(`{"name":"p","rules":[`+baseRule+`]}`, `{"name":"p","rules":[{"name":"s","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`),
			"policies[1].name", []string{`duplicate policy name "p"`, "also at policies[0].name"}, 0},
		{"policy missing rules", policies(`{"name":"p"}`), "policies[0].rules", []string{"missing", "non-empty list of rules"}, 0},
		{"policy empty rules", policies(`{"name":"p","rules":[]}`), "policies[0].rules", []string{"is empty"}, 0},
		{"policy unknown field", policies(`{"name":"p","mode":"shadow","rules":[` + baseRule + `]}`), "policies[0].mode", []string{`unknown field "mode"`, "allowed fields here: name, rules"}, 0},

		// Rules.
		{"rule not object", rules(`"r"`), "rules[0]", []string{"must be an object", "got a string"}, 0},
		{"rule unknown field", ruleWith(`"name":"r","comment":"x","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].comment", []string{`unknown field "comment"`, "allowed fields here: name, limit_keys, match, algorithm, algorithm_config, mode, max_keys"}, 0},
		{"max_keys negative", ruleWith(`"name":"r","max_keys":-1,"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].max_keys", []string{"-1 is out of range", "from 1 to 4194304", "or 0 for one key per identity"}, 0},
		{"max_keys too big", ruleWith(`"name":"r","max_keys":4194305,"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].max_keys", []string{"4194305 is out of range"}, 0},
		{"max_keys fraction", ruleWith(`"name":"r","max_keys":1.5,"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].max_keys", []string{"1.5 is not an integer"}, 0},
		{"max_keys string", ruleWith(`"name":"r","max_keys":"1000","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].max_keys", []string{"must be an integer from 1 to 4194304", "got a string"}, 0},
		{"rule duplicate field", ruleWith(`"name":"r","name":"s","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].name", []string{`duplicate field "name"`}, 0},
		{"rule missing name", ruleWith(`"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].name", []string{"missing", "keys the bucket state"}, 0},
		{"rule empty name", ruleWith(`"name":"","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].name", []string{"is empty", "1 to 64 characters"}, 0},
		{"rule long name", ruleWith(`"name":"` + strings.Repeat("a", 65) + `","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].name", []string{"is 65 characters long", "1 to 64 characters"}, 0},
		{"rule name colon", ruleWith(`"name":"a:b","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].name", []string{`"a:b" contains ':'`}, 0},
		{"rule name non-ascii", ruleWith(`"name":"caf\u00e9","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].name", []string{"contains byte 0xc3"}, 0},
		{"rule name null", ruleWith(`"name":null,"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].name", []string{"must be a string", "got null"}, 0},
		{"duplicate rule name", rules(baseRule, baseRule), "rules[1].name", []string{`duplicate rule name "r"`, "also at rules[0].name", "unique across all policies"}, 0},
		{"duplicate rule name across policies", policies(`{"name":"p","rules":[`+baseRule+`]}`, `{"name":"q","rules":[`+baseRule+`]}`),
			"policies[1].rules[0].name", []string{`duplicate rule name "r"`, "also at policies[0].rules[0].name"}, 0},
		{"rule mode", ruleWith(`"name":"r","mode":"dry-run","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].mode", []string{`must be "enforce" or "shadow"`, `got "dry-run"`}, 0},

		// limit_keys.
		{"keys missing", ruleWith(`"name":"r","algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`), "rules[0].limit_keys", []string{"missing", `["ip:address"]`}, 0},
		{"keys not array", withKeys(`"ip:address"`), "rules[0].limit_keys", []string{"must be an array", "got a string"}, 0},
		{"keys empty", withKeys(`[]`), "rules[0].limit_keys", []string{"is empty", "at least one key source"}, 0},
		{"key not string", withKeys(`[1]`), "rules[0].limit_keys[0]", []string{"must be a string", "got a number"}, 0},
		{"route with an argument", withKeys(`["route:checkout"]`), "rules[0].limit_keys[0]", []string{`"route:checkout" takes no argument; write "route"`}, 0},
		{"cidr on a route", withMatch(`{"route":{"cidr":["10.0.0.0/8"]}}`), "rules[0].match.route.cidr", []string{"cidr compares IP addresses", `not on "route"`}, 0},
		{"metadata without a key", withKeys(`["metadata:envoy.filters.http.jwt_authn"]`), "rules[0].limit_keys[0]", []string{"needs a key after the namespace", `"metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"`}, 0},
		{"metadata without a namespace", withKeys(`["metadata::sub"]`), "rules[0].limit_keys[0]", []string{"needs a namespace"}, 0},
		{"metadata empty", withKeys(`["metadata:"]`), "rules[0].limit_keys[0]", []string{"needs a namespace and a key"}, 0},
		{"metadata empty key", withKeys(`["metadata:ns:a..b"]`), "rules[0].limit_keys[0]", []string{"has an empty key"}, 0},
		{"metadata colon in keys", withKeys(`["metadata:ns:a:b"]`), "rules[0].limit_keys[0]", []string{`has a ':' in the key "a:b"`, "in brackets"}, 0},
		{"metadata unclosed bracket", withKeys(`["metadata:ns:[https://idp.example.com.sub"]`), "rules[0].limit_keys[0]", []string{"has a '[' without its ']'"}, 0},
		{"metadata empty brackets", withKeys(`["metadata:ns:[].sub"]`), "rules[0].limit_keys[0]", []string{`has an empty key "[]"`}, 0},
		{"metadata text after brackets", withKeys(`["metadata:ns:[a.b]c"]`), "rules[0].limit_keys[0]", []string{`needs a dot and a key after "[a.b]"`}, 0},
		{"metadata bracket inside a key", withKeys(`["metadata:ns:a[b]"]`), "rules[0].limit_keys[0]", []string{"has a bracket inside the key"}, 0},
		{"metadata trailing dot", withKeys(`["metadata:ns:a."]`), "rules[0].limit_keys[0]", []string{"has an empty key"}, 0},
		{"metadata nine keys", withKeys(`["metadata:ns:a.b.c.d.e.f.g.h.i"]`), "rules[0].limit_keys[0]", []string{"more than 8 keys"}, 0},
		{"metadata space", withKeys(`["metadata:ns:a b"]`), "rules[0].limit_keys[0]", []string{`contains ' '`}, 0},
		{"metadata upper case", withKeys(`["Metadata:ns:a"]`), "rules[0].limit_keys[0]", []string{"source kinds are lower-case", `"metadata:ns:a"`}, 0},
		{"metadata too long", withKeys(`["metadata:ns:` + strings.Repeat("k", 254) + `"]`), "rules[0].limit_keys[0]", []string{"longer than 256 bytes"}, 0},
		{"peer source without principal", withKeys(`["peer:address"]`), "rules[0].limit_keys[0]", []string{`"peer:address" is not a valid peer source`, `write "peer:principal"`}, 0},
		{"peer source upper case", withKeys(`["Peer:principal"]`), "rules[0].limit_keys[0]", []string{"source kinds are lower-case", `"peer:principal"`}, 0},
		{"key unknown kind", withKeys(`["form:session"]`), "rules[0].limit_keys[0]", []string{`"form:session" is not a known source`, `"ip:address", "ip:network", "peer:principal", "header:<name>"`}, 0},
		{"all with an argument", withKeys(`["all:requests"]`), "rules[0].limit_keys[0]", []string{`takes no argument; write "all"`}, 0},
		{"a condition on all", withMatch(`{"all": "*"}`), "rules[0].match.all", []string{`"all" is the same for every request`, "use it in limit_keys"}, 0},
		{"connection with an argument", withKeys(`["connection:id"]`), "rules[0].limit_keys[0]", []string{`takes no argument; write "connection"`}, 0},
		{"a condition on connection", withMatch(`{"connection": "7"}`), "rules[0].match.connection", []string{"a key only", "a bucket per connection"}, 0},
		{"connection upper case", withKeys(`["Connection"]`), "rules[0].limit_keys[0]", []string{"not a known source"}, 0},
		{"cookie alone", withKeys(`["cookie"]`), "rules[0].limit_keys[0]", []string{`needs a cookie name, e.g. "cookie:session"`}, 0},
		{"cookie empty", withKeys(`["cookie:"]`), "rules[0].limit_keys[0]", []string{"invalid cookie name", "name is empty"}, 0},
		{"cookie space", withMatch(`{"cookie:a b":"x"}`), `rules[0].match["cookie:a b"]`, []string{"invalid cookie name", `contains ' '`}, 0},
		{"cookie upper case", withKeys(`["Cookie:sid"]`), "rules[0].limit_keys[0]", []string{"source kinds are lower-case", `"cookie:sid"`}, 0},
		{"key upper-case kind", withKeys(`["Header:X-Key"]`), "rules[0].limit_keys[0]", []string{"source kinds are lower-case", `"header:X-Key"`}, 0},
		{"key ip alone", withKeys(`["ip"]`), "rules[0].limit_keys[0]", []string{`"ip" is not a valid IP source`, `write "ip:address"`}, 0},
		{"key ip other", withKeys(`["ip:port"]`), "rules[0].limit_keys[0]", []string{`write "ip:address"`}, 0},
		{"key header alone", withKeys(`["header"]`), "rules[0].limit_keys[0]", []string{"needs a header name"}, 0},
		{"key header empty", withKeys(`["header:"]`), "rules[0].limit_keys[0]", []string{"invalid header name", "name is empty"}, 0},
		{"key header space", withKeys(`["header:x key"]`), "rules[0].limit_keys[0]", []string{"invalid header name", "contains ' '"}, 0},
		{"key header pseudo", withKeys(`["header::path"]`), "rules[0].limit_keys[0]", []string{"pseudo-headers", `"path", "method" or "host"`}, 0},
		{"key header long", withKeys(`["header:` + strings.Repeat("x", 257) + `"]`), "rules[0].limit_keys[0]", []string{"longer than 256 bytes"}, 0},
		{"key query empty", withKeys(`["query:"]`), "rules[0].limit_keys[0]", []string{"needs a query parameter name"}, 0},
		{"key query equals", withKeys(`["query:a=b"]`), "rules[0].limit_keys[0]", []string{"query parameter name containing '='"}, 0},
		{"key jwt empty", withKeys(`["jwt:"]`), "rules[0].limit_keys[0]", []string{"needs a claim name"}, 0},
		{"key jwt space", withKeys(`["jwt:a b"]`), "rules[0].limit_keys[0]", []string{"claim name containing ' '"}, 0},
		{"key path argument", withKeys(`["path:/a"]`), "rules[0].limit_keys[0]", []string{"takes no argument", `write "path"`}, 0},
		{"key method argument", withKeys(`["method:GET"]`), "rules[0].limit_keys[0]", []string{"takes no argument"}, 0},
		{"key duplicate", withKeys(`["header:X-Key","header:x-key"]`), "rules[0].limit_keys[1]", []string{`duplicate key source "header:x-key"`, "also at rules[0].limit_keys[0]"}, 0},

		// match.
		{"match not object", withMatch(`["path"]`), "rules[0].match", []string{"must be an object", "got an array"}, 0},
		{"match value number", withMatch(`{"jwt:plan":1}`), `rules[0].match["jwt:plan"]`, []string{"must be a string", "got a number"}, 0},
		{"match value null", withMatch(`{"method":null}`), "rules[0].match.method", []string{"must be a string", "got null"}, 0},
		{"match value empty", withMatch(`{"path_prefix":""}`), "rules[0].match.path_prefix", []string{"is empty"}, 0},
		{"match bad source", withMatch(`{"form:a":"b"}`), `rules[0].match["form:a"]`, []string{`"form:a" is not a known source`, `"path_prefix" is also accepted`}, 0},
		{"match prefix typo", withMatch(`{"path-prefix":"/a"}`), "rules[0].match.path-prefix", []string{"is not a known source"}, 0},
		{"match duplicate header", withMatch(`{"header:X-Plan":"a","header:x-plan":"b"}`), `rules[0].match["header:x-plan"]`, []string{`matches the same source as rules[0].match["header:X-Plan"]`}, 0},
		{"match duplicate key", withMatch(`{"method":"GET","method":"PUT"}`), "rules[0].match.method", []string{`duplicate field "method"`}, 0},

		// algorithm.
		{"algorithm missing", ruleWith(`"name":"r","limit_keys":["ip:address"],"algorithm_config":{"rps":5,"burst":10}`), "rules[0].algorithm", []string{"missing", `"token_bucket"`}, 0},
		{"algorithm unknown", ruleWith(`"name":"r","limit_keys":["ip:address"],"algorithm":"leaky_bucket","algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].algorithm", []string{`unknown algorithm "leaky_bucket"`, `use one of: "token_bucket"`}, 0},
		{"algorithm not string", ruleWith(`"name":"r","limit_keys":["ip:address"],"algorithm":1,"algorithm_config":{"rps":5,"burst":10}`),
			"rules[0].algorithm", []string{"must be a string", "got a number"}, 0},
		{"algorithm_config missing", ruleWith(`"name":"r","limit_keys":["ip:address"],"algorithm":"token_bucket"`), "rules[0].algorithm_config", []string{"missing", "tokens_per_second"}, 0},
		{"algorithm_config not object", withTB(`[5,10]`), "rules[0].algorithm_config", []string{"must be an object", "got an array"}, 0},
		{"algorithm_config unknown", withTB(`{"rps":5,"burst":10,"bursts":1}`), tb + "bursts", []string{`unknown field "bursts"`, `did you mean "burst"?`}, 0},

		// token_bucket: rate.
		{"rate missing", withTB(`{"burst":10}`), tb + "tokens_per_second", []string{"missing", "or its alias rps"}, 0},
		{"rate both", withTB(`{"tokens_per_second":5,"rps":5,"burst":10}`), tb + "rps", []string{"set only one of tokens_per_second and rps"}, 0},
		{"rate both invalid", withTB(`{"tokens_per_second":-1,"rps":5,"burst":10}`), tb + "rps", []string{"set only one"}, 2},
		{"rate zero", withTB(`{"tokens_per_second":0,"burst":10}`), tb + "tokens_per_second", []string{"0 is not positive", "must be > 0"}, 0},
		{"rps negative", withTB(`{"rps":-5,"burst":10}`), tb + "rps", []string{"-5 is not positive"}, 0},
		{"rate infinite", withTB(`{"rps":1e999,"burst":10}`), tb + "rps", []string{"1e999 is not a finite number"}, 0},
		{"rate string", withTB(`{"rps":"5","burst":10}`), tb + "rps", []string{"must be a number", `got a string "5"`}, 0},
		{"rate null", withTB(`{"rps":null,"burst":10}`), tb + "rps", []string{"must be a number", "got null"}, 0},

		// token_bucket: burst.
		{"burst missing", withTB(`{"rps":5}`), tb + "burst", []string{"missing", ">= tokens_per_second"}, 0},
		{"burst below rate", withTB(`{"tokens_per_second":10,"burst":5}`), tb + "burst", []string{"5 is below tokens_per_second 10; burst must be >= tokens_per_second"}, 0},
		{"burst below rps", withTB(`{"rps":10,"burst":9.5}`), tb + "burst", []string{"9.5 is below rps 10; burst must be >= rps"}, 0},
		{"burst zero", withTB(`{"rps":5,"burst":0}`), tb + "burst", []string{"0 is not positive"}, 0},
		{"burst huge", withTB(`{"rps":5,"burst":1e13}`), tb + "burst", []string{"1e13 is too large", "<= 1e12"}, 0},
		{"burst infinite", withTB(`{"rps":5,"burst":-1e400}`), tb + "burst", []string{"is not a finite number"}, 0},
		{"burst bool", withTB(`{"rps":5,"burst":true}`), tb + "burst", []string{"must be a number", "got a boolean"}, 0},

		// token_bucket: costs.
		{"response_bytes with an argument", withTB(`{"rps":5,"burst":10,"cost_source":"response_bytes:body"}`), tb + "cost_source", []string{`takes no argument; write "response_bytes"`}, 0},
		{"response_bytes on a window", withAlg("fixed_window", `{"limit":10,"window_seconds":60,"cost_source":"response_bytes"}`), "rules[0].algorithm_config.cost_source", []string{"is a response cost source, supported by token_bucket and quota only"}, 0},
		{"cost_source unknown", withTB(`{"rps":5,"burst":10,"cost_source":"cookie:w"}`), tb + "cost_source", []string{`"cookie:w" is not a cost source`, `"fixed", "header:<name>", "query:<name>", "metadata:<namespace>:<key>", "response_header:<name>", "response_trailer:<name>", "response_status:<statuses>", "response_grpc_status:<codes>", "response_json:<path>" or "response_bytes"`}, 0},
		{"cost_source jwt", withTB(`{"rps":5,"burst":10,"cost_source":"jwt:w"}`), tb + "cost_source", []string{"is not a cost source"}, 0},
		{"cost_source header empty", withTB(`{"rps":5,"burst":10,"cost_source":"header:"}`), tb + "cost_source", []string{"invalid header name"}, 0},
		{"cost_source query bad", withTB(`{"rps":5,"burst":10,"cost_source":"query:a&b"}`), tb + "cost_source", []string{"containing '&'"}, 0},
		{"cost_source number", withTB(`{"rps":5,"burst":10,"cost_source":1}`), tb + "cost_source", []string{"must be a string", "got a number"}, 0},
		{"fixed_cost zero", withTB(`{"rps":5,"burst":10,"fixed_cost":0}`), tb + "fixed_cost", []string{"0 is not positive", "must be > 0"}, 0},
		{"fixed_cost negative", withTB(`{"rps":5,"burst":10,"fixed_cost":-2}`), tb + "fixed_cost", []string{"-2 is not positive"}, 0},
		{"fixed_cost above burst", withTB(`{"rps":5,"burst":10,"fixed_cost":11}`), tb + "fixed_cost", []string{"11 exceeds burst 10", "could never be admitted"}, 0},
		{"fixed_cost huge", withTB(`{"rps":5,"burst":1e12,"fixed_cost":2e9}`), tb + "fixed_cost", []string{"2e9 is too large", "<= 1e9"}, 0},
		{"fixed_cost string", withTB(`{"rps":5,"burst":10,"fixed_cost":"1"}`), tb + "fixed_cost", []string{"must be a number"}, 0},
		{"default_cost zero", withTB(`{"rps":5,"burst":10,"cost_source":"header:w","default_cost":0}`), tb + "default_cost", []string{"0 is not positive"}, 0},
		{"default_cost above burst", withTB(`{"rps":5,"burst":10,"cost_source":"header:w","default_cost":20}`), tb + "default_cost", []string{"20 exceeds burst 10"}, 0},
		{"default_cost infinite", withTB(`{"rps":5,"burst":10,"default_cost":1e309}`), tb + "default_cost", []string{"is not a finite number"}, 0},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want an error at %q\ninput: %s", c, tc.path, tc.in)
			}
			if c != nil {
				t.Errorf("Parse returned a config together with an error")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			n := tc.n
			if n == 0 {
				n = 1
			}
			if len(es) != n {
				t.Errorf("got %d errors, want %d:\n%v", len(es), n, err)
			}
			e := es[0]
			if e.Path != tc.path {
				t.Errorf("path = %q, want %q (message: %s)", e.Path, tc.path, e.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q does not contain %q", e.Message, w)
				}
			}
		})
	}
}

// TestParseReportsEveryProblem checks that problems in different places are
// all reported, in document order.
func TestParseReportsEveryProblem(t *testing.T) {
	in := `{
  "mode": "audit",
  "reject_status": 99,
  "extra": true,
  "policies": [
    {"name": "p", "rules": [
      {"name": "a", "limit_keys": ["bogus"], "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 10, "burst": 5}},
      {"name": "a", "limit_keys": ["ip:address"], "algorithm": "sliding",
       "algorithm_config": {}}
    ]},
    {"name": "p", "rules": [
      {"name": "b", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
       "algorithm_config": {"rps": 1, "burst": 1, "fixed_cost": 0}, "mode": "loud"}
    ]}
  ]
}`
	_, err := Parse([]byte(in))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		"extra",
		"mode",
		"reject_status",
		"policies[0].rules[0].limit_keys[0]",
		"policies[0].rules[0].algorithm_config.burst",
		"policies[0].rules[1].name",
		"policies[0].rules[1].algorithm",
		"policies[1].name",
		"policies[1].rules[0].mode",
		"policies[1].rules[0].algorithm_config.fixed_cost",
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Path)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("paths:\n%s\nwant:\n%s\nerrors:\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"), err)
	}
	// Error() is one line per problem, each "<path>: <message>".
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(es) {
		t.Fatalf("Error() has %d lines, want %d", len(lines), len(es))
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, es[i].Path+": ") || !strings.HasSuffix(l, es[i].Message) {
			t.Errorf("line %d = %q, want %q", i, l, es[i].Path+": "+es[i].Message)
		}
	}
}

func TestFieldErrorString(t *testing.T) {
	if got := (FieldError{Path: "a.b", Message: "bad"}).Error(); got != "a.b: bad" {
		t.Errorf("got %q", got)
	}
	if got := (FieldError{Message: "bad"}).Error(); got != "bad" {
		t.Errorf("got %q", got)
	}
	if got := (Errors{{Path: "a", Message: "x"}, {Path: "b", Message: "y"}}).Error(); got != "a: x\nb: y" {
		t.Errorf("got %q", got)
	}
}

func TestParseDefaults(t *testing.T) {
	c := mustParse(t, rules(baseRule))
	if c.Mode != ModeEnforce || c.RejectStatus != 429 || !c.ResponseHeaders || c.LegacyHeaders.On() || c.ShadowHeader != "x-sluice-shadow" || c.TrustedHops != 0 {
		t.Errorf("defaults = %+v", c)
	}
	r := c.Policies[0].Rules[0]
	if r.Mode != ModeEnforce || r.Policy != "default" || c.Policies[0].Name != "default" {
		t.Errorf("rule = %+v", r)
	}
	if *r.TokenBucket != (TokenBucket{TokensPerSecond: 5, Burst: 10, Cost: CostSource{Kind: CostFixed}, FixedCost: 1, DefaultCost: 1}) {
		t.Errorf("bucket = %+v", *r.TokenBucket)
	}
}

func TestParseOptions(t *testing.T) {
	c := mustParse(t, `{"mode":"shadow","reject_status":503,"reject_grpc_status":"unavailable","response_headers":false,"legacy_headers":true,"shadow_header":"X-Would-Limit",
		"xff_trusted_hops":2,"rules":[`+baseRule+`,
		{"name":"strict","mode":"enforce","limit_keys":["header:X-Api-Key","query:key","jwt:sub","path","method","host","ip:address"],
		 "match":{"path_prefix":"/api/","method":"POST","header:X-Tier":"gold","path":"/api/v1","jwt:plan":"pro","host":"a.example"},
		 "algorithm":"token_bucket","algorithm_config":{"tokens_per_second":2.5,"burst":2.5,"cost_source":"header:X-Weight","fixed_cost":2.5,"default_cost":0.5}},
		{"name":"q.v_1-2","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1,"cost_source":"query:w"}}]}`)
	if c.Mode != ModeShadow || c.RejectStatus != 503 || c.RejectGRPCStatus != 14 || c.ResponseHeaders || c.LegacyHeaders != LegacyRateLimit || c.ShadowHeader != "x-would-limit" || c.TrustedHops != 2 {
		t.Errorf("options = %+v", c)
	}
	if r := c.RuleByName("r"); r.Mode != ModeShadow {
		t.Errorf("rule r inherits mode %q, want shadow", r.Mode)
	}
	s := c.RuleByName("strict")
	if s.Mode != ModeEnforce {
		t.Errorf("rule strict mode %q, want enforce (rule wins)", s.Mode)
	}
	wantKeys := []KeySource{{SourceHeader, "x-api-key"}, {SourceQuery, "key"}, {SourceJWT, "sub"}, {SourcePath, ""}, {SourceMethod, ""}, {SourceHost, ""}, {SourceIP, ""}}
	if !equalKeys(s.Keys, wantKeys) {
		t.Errorf("keys = %+v\nwant %+v", s.Keys, wantKeys)
	}
	wantMatch := []Matcher{
		{Source: KeySource{SourceHeader, "x-tier"}, Cond: Condition{Value: "gold"}},
		{Source: KeySource{SourceHost, ""}, Cond: Condition{Value: "a.example"}},
		{Source: KeySource{SourceJWT, "plan"}, Cond: Condition{Value: "pro"}},
		{Source: KeySource{SourceMethod, ""}, Cond: Condition{Value: "POST"}},
		{Source: KeySource{SourcePath, ""}, Cond: Condition{Value: "/api/v1"}},
		{Source: KeySource{SourcePath, ""}, Cond: Condition{Op: MatchPrefix, Value: "/api/"}, PathPrefix: true},
	}
	if len(s.Match) != len(wantMatch) {
		t.Fatalf("match = %+v", s.Match)
	}
	for i := range wantMatch {
		if !reflect.DeepEqual(s.Match[i], wantMatch[i]) {
			t.Errorf("match[%d] = %+v, want %+v", i, s.Match[i], wantMatch[i])
		}
	}
	if *s.TokenBucket != (TokenBucket{TokensPerSecond: 2.5, Burst: 2.5, Cost: CostSource{Kind: CostHeader, Name: "x-weight"}, FixedCost: 2.5, DefaultCost: 0.5}) {
		t.Errorf("strict bucket = %+v", *s.TokenBucket)
	}
	if q := c.RuleByName("q.v_1-2"); q.TokenBucket.Cost != (CostSource{Kind: CostQuery, Name: "w"}) {
		t.Errorf("query cost = %+v", q.TokenBucket.Cost)
	}
}

func TestParseNumbers(t *testing.T) {
	c := mustParse(t, `{"reject_status":5e2,"xff_trusted_hops":10,"rules":[{"name":"r","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1e-3,"burst":1e12,"fixed_cost":1e9}}]}`)
	if c.RejectStatus != 500 || c.TrustedHops != 10 {
		t.Errorf("got %d %d", c.RejectStatus, c.TrustedHops)
	}
	tb := c.Policies[0].Rules[0].TokenBucket
	if tb.TokensPerSecond != 1e-3 || tb.Burst != 1e12 || tb.FixedCost != 1e9 {
		t.Errorf("bucket = %+v", *tb)
	}
}

func TestMarshalJSONGolden(t *testing.T) {
	c := mustParse(t, fairvisorTiered)
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"mode":"enforce","reject_status":429,"reject_grpc_status":"resource_exhausted","response_headers":true,"legacy_headers":false,"shadow_header":"x-sluice-shadow","xff_trusted_hops":0,` +
		`"policies":[{"name":"default","rules":[` +
		`{"name":"enterprise","limit_keys":["header:x-api-key"],"match":{"jwt:plan":"enterprise"},"algorithm":"token_bucket",` +
		`"algorithm_config":{"tokens_per_second":1000,"burst":2000,"cost_source":"fixed","fixed_cost":1,"default_cost":1},"mode":"enforce","max_keys":65536},` +
		`{"name":"free","limit_keys":["header:x-api-key"],"algorithm":"token_bucket",` +
		`"algorithm_config":{"tokens_per_second":10,"burst":20,"cost_source":"fixed","fixed_cost":1,"default_cost":1},"mode":"enforce","max_keys":65536}]}]}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	var nilCfg *Config
	if b, _ := nilCfg.MarshalJSON(); string(b) != "null" {
		t.Errorf("nil config = %s", b)
	}
}

func TestKeySourceString(t *testing.T) {
	for _, s := range []string{"ip:address", "peer:principal", "header:x-api-key", "query:k", "jwt:sub", "cookie:Session_ID", "path", "method", "host", "route", "all"} {
		k, ok := ParseSource(s)
		if !ok || k.String() != s {
			t.Errorf("ParseSource(%q) = %+v %v; String() = %q", s, k, ok, k.String())
		}
	}
	if k, ok := ParseSource("header:X-Api-Key"); !ok || k != (KeySource{SourceHeader, "x-api-key"}) {
		t.Errorf("header not lower-cased: %+v", k)
	}
	if _, ok := ParseSource("form:x"); ok {
		t.Error("ParseSource(form:x) ok")
	}
	if s := (KeySource{}).String(); s != "invalid" {
		t.Errorf("zero KeySource = %q", s)
	}
	for c, want := range map[CostSource]string{{Kind: CostFixed}: "fixed", {Kind: CostHeader, Name: "w"}: "header:w", {Kind: CostQuery, Name: "w"}: "query:w"} {
		if c.String() != want {
			t.Errorf("%+v.String() = %q, want %q", c, c.String(), want)
		}
	}
}

func TestRuleByNameNil(t *testing.T) {
	var c *Config
	if c.RuleByName("x") != nil {
		t.Error("nil config returned a rule")
	}
}

func BenchmarkParse(b *testing.B) {
	data := []byte(configurationExample)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseLarge guards against super-linear behaviour on big inputs.
func TestParseLarge(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"rules":[`)
	for i := 0; i < 5000; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"name":"r` + strings.Repeat("x", i%50) + `-` + itoa(i) + `","limit_keys":["ip:address","header:x-` + itoa(i) + `"],"match":{"path_prefix":"/` + itoa(i) + `"},"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10},"unknown` + itoa(i) + `":1}`)
	}
	sb.WriteString(`]}`)
	_, err := Parse([]byte(sb.String()))
	var es Errors
	if !errors.As(err, &es) || len(es) != 5000 {
		t.Fatalf("want 5000 unknown-field errors, got %d", len(es))
	}
	long := `{"rules":[{"name":"` + strings.Repeat("a", 1<<20) + `"}],"` + strings.Repeat("k", 1<<20) + `":1}`
	if _, err := Parse([]byte(long)); err == nil {
		t.Fatal("long names accepted")
	} else if len(err.Error()) > 4096 {
		t.Errorf("error message is %d bytes; long values must be truncated", len(err.Error()))
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestMaxCostMatchesLimiter(t *testing.T) {
	// The filter parses header/query costs with limiter.ParseCost; a
	// configured cost must obey the same bound.
	if MaxCost != limiter.MaxCost {
		t.Errorf("policy.MaxCost %v != limiter.MaxCost %v", MaxCost, limiter.MaxCost)
	}
}

func TestMaxKeys(t *testing.T) {
	for _, tc := range []struct {
		field string
		want  int
	}{
		{``, DefaultMaxKeys},
		{`"max_keys":0,`, 0},
		{`"max_keys":1,`, 1},
		{`"max_keys":1e3,`, 1000},
		{`"max_keys":4194304,`, MaxMaxKeys},
	} {
		c := mustParse(t, ruleWith(`"name":"r",`+tc.field+`"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}`))
		if got := c.Policies[0].Rules[0].MaxKeys; got != tc.want {
			t.Errorf("%s: MaxKeys = %d, want %d", tc.field, got, tc.want)
		}
		checkInvariants(t, c)
	}
	if DefaultMaxKeys != 65536 || MaxMaxKeys != 1<<22 {
		t.Errorf("documented bounds changed: %d, %d", DefaultMaxKeys, MaxMaxKeys)
	}
}

func TestEveryGRPCStatusNameRoundTrips(t *testing.T) {
	if c := mustParse(t, top(`"mode":"enforce"`)); c.RejectGRPCStatus != DefaultRejectGRPCStatus {
		t.Errorf("default reject_grpc_status = %d, want %d", c.RejectGRPCStatus, DefaultRejectGRPCStatus)
	}
	for code := 1; code <= 16; code++ {
		name := GRPCCodeName(code)
		c := mustParse(t, top(`"reject_grpc_status":"`+name+`"`))
		if c.RejectGRPCStatus != code {
			t.Fatalf("%q parsed as %d, want %d", name, c.RejectGRPCStatus, code)
		}
		out, err := c.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), `"reject_grpc_status":"`+name+`"`) {
			t.Fatalf("normalized form of %q lost it: %s", name, out)
		}
	}
}

func TestGRPCStatusOfHTTPFollowsGRPCsMapping(t *testing.T) {
	for status, want := range map[int]string{400: "internal", 401: "unauthenticated", 403: "permission_denied",
		404: "unimplemented", 429: "unavailable", 451: "unknown", 503: "unavailable"} {
		if got := GRPCCodeName(GRPCStatusOfHTTP(status)); got != want {
			t.Errorf("HTTP %d maps to %s, want %s", status, got, want)
		}
	}
}

func TestLegacyHeadersNameTheirFields(t *testing.T) {
	for _, tc := range []struct {
		value, normalized string
		want              LegacyHeaders
		limit             string
	}{
		{`false`, `false`, LegacyNone, ""},
		{`true`, `true`, LegacyRateLimit, "ratelimit-limit"},
		{`"ratelimit"`, `true`, LegacyRateLimit, "ratelimit-limit"},
		{`"x-ratelimit"`, `"x-ratelimit"`, LegacyXRateLimit, "x-ratelimit-limit"},
	} {
		c := mustParse(t, `{"legacy_headers":`+tc.value+`,"rules":[`+baseRule+`]}`)
		limit, remaining, reset := c.LegacyHeaders.Names()
		if c.LegacyHeaders != tc.want || limit != tc.limit || c.LegacyHeaders.On() != (tc.limit != "") {
			t.Errorf("%s: parsed %v, names %q %q %q", tc.value, c.LegacyHeaders, limit, remaining, reset)
		}
		if tc.limit != "" && (remaining != strings.TrimSuffix(tc.limit, "limit")+"remaining" || reset != strings.TrimSuffix(tc.limit, "limit")+"reset") {
			t.Errorf("%s: names %q %q %q", tc.value, limit, remaining, reset)
		}
		norm, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(norm), `"legacy_headers":`+tc.normalized+`,`) {
			t.Errorf("%s: normalized form %s, want legacy_headers %s", tc.value, norm, tc.normalized)
		}
		if again := mustParse(t, string(norm)); again.LegacyHeaders != tc.want {
			t.Errorf("%s: the normalized form parses to %v", tc.value, again.LegacyHeaders)
		}
	}
}
