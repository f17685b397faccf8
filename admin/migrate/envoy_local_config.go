package migrate

// The converter of Envoy's local_ratelimit configurations (envoy_local.go):
// the LocalRateLimit configuration itself.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

type elConfig struct {
	path          string
	statPrefix    string
	status        int // 0: Envoy's default, 429
	bucket        *elEnvoyBucket
	enabled       float64 // filter_enabled's percentage (absent: 0)
	enforced      float64
	runtimeKeys   []string
	descriptors   []elDesc
	stage         int
	perConnection bool
	clusterShared bool
	xHeaders      bool
	vhOption      string // OVERRIDE (the default), INCLUDE, IGNORE
	alwaysConsume bool
	exhausted     bool // rate_limited_as_resource_exhausted
	own           []elRateLimit
	hasOwn        bool
	maxDynamic    int
	respHeaders   [][2]string // name (lower case), value
	reqHeaders    []string
	enabledSet    bool
}

type elEnvoyBucket struct {
	maxTokens, perFill int
	interval           time.Duration
}

type elDesc struct {
	entries []elKV
	bucket  *elEnvoyBucket
	shadow  bool
	path    string
}

type elKV struct{ key, value string }

// exact: every entry has a value (Envoy looks these up first).
func (d elDesc) exact() bool {
	return !slices.ContainsFunc(d.entries, func(e elKV) bool { return e.value == "" })
}

func (d elDesc) valued() int {
	n := 0
	for _, e := range d.entries {
		if e.value != "" {
			n++
		}
	}
	return n
}

// mode follows the filter: a request over the limit is rejected only when
// enforced (filter_enforced, "Defaults to 0% of requests for safety" as
// filter_enabled does); enabled but not enforced, it is counted and goes
// on with request_headers_to_add_when_not_enforced, Sluice's shadow mode.
func (cfg *elConfig) mode() string {
	if cfg.enforced >= 100 {
		return string(policy.ModeEnforce)
	}
	return string(policy.ModeShadow)
}

// partial reports whether filter_enforced enforces some requests but not
// all: Sluice enforces a rule with a bucket per client on that share of
// its clients.
func (cfg *elConfig) partial() bool { return cfg.enforced > 0 && cfg.enforced < 100 }

// parseConfig reads a LocalRateLimit, refusing fields it does not know (a
// misspelt one would be dropped silently).
func (c *elConv) parseConfig(n *yaml.Node, path string, perRoute bool) (*elConfig, error) {
	if cfg := c.configs[path]; cfg != nil {
		return cfg, nil
	}
	if n = elDeref(n); n == nil || n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a LocalRateLimit object", elAt(n, path))
	}
	cfg := &elConfig{path: path, alwaysConsume: true, vhOption: "OVERRIDE"}
	for _, kv := range elPairs(n) {
		k := elSnakeCase(kv[0].Value)
		if err := c.configField(cfg, k, kv[1], elJoin(path, k)); err != nil {
			return nil, err
		}
	}
	switch {
	case cfg.statPrefix == "":
		return nil, fmt.Errorf("%s: stat_prefix: missing (Envoy refuses a LocalRateLimit without it)", elAt(n, path))
	case perRoute && cfg.bucket == nil:
		return nil, fmt.Errorf("%s: token_bucket: missing (Envoy refuses a per-route LocalRateLimit without one)", elAt(n, path))
	}
	c.configs[path] = cfg
	return cfg, nil
}

func (c *elConv) configField(cfg *elConfig, k string, v *yaml.Node, p string) error {
	var err error
	switch k {
	case "@type":
	case "stat_prefix":
		cfg.statPrefix = elStr(v)
	case "status":
		cfg.status, err = c.httpStatus(elField(v, "code"), elJoin(p, "code"))
	case "token_bucket":
		cfg.bucket, err = elTokenBucket(v, p)
	case "filter_enabled":
		cfg.enabledSet = true
		cfg.enabled, err = cfg.fraction(v, p)
	case "filter_enforced":
		cfg.enforced, err = cfg.fraction(v, p)
	case "descriptors":
		cfg.descriptors, err = elDescriptors(v, p)
	case "stage":
		cfg.stage, err = elIntOf(v, p, 0, 10)
	case "local_rate_limit_per_downstream_connection":
		cfg.perConnection, err = elBoolOf(v, p)
	case "local_cluster_rate_limit":
		cfg.clusterShared = true
	case "enable_x_ratelimit_headers":
		cfg.xHeaders, err = elEnumOf(v, p, []string{"OFF", "DRAFT_VERSION_03"}, "DRAFT_VERSION_03")
	case "vh_rate_limits":
		cfg.vhOption, err = elEnumName(v, p, []string{"OVERRIDE", "INCLUDE", "IGNORE"})
	case "always_consume_default_token_bucket":
		cfg.alwaysConsume, err = elBoolOf(v, p)
	case "rate_limited_as_resource_exhausted":
		cfg.exhausted, err = elBoolOf(v, p)
	case "rate_limits":
		cfg.hasOwn = true
		cfg.own, err = c.rateLimitList(v, p)
	case "max_dynamic_descriptors":
		cfg.maxDynamic, err = elIntOf(v, p, 1, math.MaxUint32)
	case "response_headers_to_add":
		cfg.respHeaders = elHeaders(v)
	case "request_headers_to_add_when_not_enforced":
		cfg.reqHeaders = elHeaderKeys(v)
	default:
		return fmt.Errorf("%s: not a field of LocalRateLimit; remove it, or convert this filter by hand", elAt(v, p))
	}
	return err
}

// elEnumOf reads a protobuf enum given by name or number; it is true for want.
func elEnumOf(n *yaml.Node, path string, names []string, want string) (bool, error) {
	s, err := elEnumName(n, path, names)
	return s == want, err
}

func elEnumName(n *yaml.Node, path string, names []string) (string, error) {
	s := elStr(n)
	if i, err := strconv.Atoi(s); err == nil && i >= 0 && i < len(names) {
		return names[i], nil
	}
	if !slices.Contains(names, s) {
		return "", fmt.Errorf("%s: %q: want one of %s", elAt(n, path), s, strings.Join(names, ", "))
	}
	return s, nil
}

func elTokenBucket(n *yaml.Node, path string) (*elEnvoyBucket, error) {
	b := &elEnvoyBucket{perFill: 1}
	for _, kv := range elPairs(n) {
		k, v := elSnakeCase(kv[0].Value), kv[1]
		p := elJoin(path, k)
		var err error
		switch k {
		case "max_tokens":
			b.maxTokens, err = elIntOf(v, p, 1, math.MaxUint32)
		case "tokens_per_fill":
			b.perFill, err = elIntOf(elWrapped(v), p, 1, math.MaxUint32)
		case "fill_interval":
			b.interval, err = elDuration(v, p)
		default:
			err = fmt.Errorf("%s: not a field of a token bucket (max_tokens, tokens_per_fill, fill_interval)", elAt(v, p))
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case b.maxTokens == 0:
		return nil, fmt.Errorf("%s: max_tokens: missing (Envoy refuses a token bucket without it)", elAt(n, path))
	case b.interval == 0:
		return nil, fmt.Errorf("%s: fill_interval: missing (Envoy refuses a token bucket without it)", elAt(n, path))
	case b.interval < 50*time.Millisecond:
		return nil, fmt.Errorf("%s: fill_interval %s: Envoy refuses less than 50ms", elAt(n, path), b.interval)
	}
	return b, nil
}

// elDuration reads a protobuf Duration: "1.5s" (JSON), or seconds and nanos.
func elDuration(n *yaml.Node, path string) (time.Duration, error) {
	if elIsMapping(n) {
		s, err := elIntOf(elField(n, "seconds"), elJoin(path, "seconds"), 0, 315576000000)
		if elField(n, "seconds") == nil {
			s, err = 0, nil
		}
		if err != nil {
			return 0, err
		}
		ns := 0
		if v := elField(n, "nanos"); v != nil {
			if ns, err = elIntOf(v, elJoin(path, "nanos"), 0, 999999999); err != nil {
				return 0, err
			}
		}
		return time.Duration(s)*time.Second + time.Duration(ns), nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(elStr(n)))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q: want a duration such as 1s or 0.5s", elAt(n, path), elStr(n))
	}
	return d, nil
}

// fraction reads a RuntimeFractionalPercent's default as a percentage;
// its runtime key is noted (a runtime override would change it).
func (cfg *elConfig) fraction(n *yaml.Node, path string) (float64, error) {
	dv := elField(n, "default_value")
	if dv == nil {
		return 0, fmt.Errorf("%s: default_value: missing (Envoy requires it)", elAt(n, path))
	}
	num := 0
	if v := elField(dv, "numerator"); v != nil {
		var err error
		if num, err = elIntOf(v, elJoin(path, "default_value.numerator"), 0, math.MaxUint32); err != nil {
			return 0, err
		}
	}
	den := 100.0
	if v := elField(dv, "denominator"); v != nil {
		name, err := elEnumName(v, elJoin(path, "default_value.denominator"), []string{"HUNDRED", "TEN_THOUSAND", "MILLION"})
		if err != nil {
			return 0, err
		}
		den = map[string]float64{"HUNDRED": 100, "TEN_THOUSAND": 10000, "MILLION": 1e6}[name]
	}
	if k := elStr(elField(n, "runtime_key")); k != "" {
		cfg.runtimeKeys = append(cfg.runtimeKeys, k)
	}
	return math.Min(100, float64(num)*100/den), nil
}

func elDescriptors(n *yaml.Node, path string) ([]elDesc, error) {
	if !elIsSequence(n) {
		return nil, fmt.Errorf("%s: want a list of descriptors", elAt(n, path))
	}
	var out []elDesc
	seen := map[string]int{}
	for i, dn := range elItems(n) {
		p := elIndex(path, i)
		d, err := elDescriptor(dn, p)
		if err != nil {
			return nil, err
		}
		k := fmt.Sprint(d.entries)
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("%s: the same entries as %s; Envoy refuses duplicate descriptors", elAt(dn, p), elIndex(path, j))
		}
		seen[k] = i
		out = append(out, d)
	}
	return out, nil
}

func elDescriptor(n *yaml.Node, path string) (elDesc, error) {
	d := elDesc{path: path}
	for _, kv := range elPairs(n) {
		k, v := elSnakeCase(kv[0].Value), kv[1]
		p := elJoin(path, k)
		var err error
		switch k {
		case "entries":
			for j, e := range elItems(v) {
				kv := elKV{key: elStr(elField(e, "key")), value: elStr(elField(e, "value"))}
				if kv.key == "" {
					return d, fmt.Errorf("%s: key: missing", elAt(e, elIndex(p, j)))
				}
				d.entries = append(d.entries, kv)
			}
		case "token_bucket":
			d.bucket, err = elTokenBucket(v, p)
		case "shadow_mode":
			d.shadow, err = elBoolOf(v, p)
		default:
			err = fmt.Errorf("%s: not a field of a descriptor (entries, token_bucket, shadow_mode)", elAt(v, p))
		}
		if err != nil {
			return d, err
		}
	}
	switch {
	case len(d.entries) == 0:
		return d, fmt.Errorf("%s: entries: missing (Envoy requires at least one)", elAt(n, path))
	case d.bucket == nil:
		return d, fmt.Errorf("%s: token_bucket: missing (Envoy requires one per descriptor)", elAt(n, path))
	}
	return d, nil
}

// elHeaderKeys are the header names of a list of HeaderValueOptions.
func elHeaders(n *yaml.Node) [][2]string {
	var out [][2]string
	for _, h := range elItems(n) {
		hv := elField(h, "header")
		if k := elStr(elField(hv, "key")); k != "" {
			out = append(out, [2]string{strings.ToLower(k), elStr(elField(hv, "value"))})
		}
	}
	return out
}

func elHeaderKeys(n *yaml.Node) []string {
	var out []string
	for _, h := range elItems(n) {
		if k := elStr(elField(elField(h, "header"), "key")); k != "" {
			out = append(out, strings.ToLower(k))
		}
	}
	return out
}

// httpStatus reads an HttpStatus code, by number or by Envoy's enum name;
// like the filter, a code below 400 is 429.
func (c *elConv) httpStatus(n *yaml.Node, path string) (int, error) {
	s := elStr(n)
	code, err := strconv.Atoi(s)
	if err != nil {
		var ok bool
		if code, ok = elEnvoyStatusCodes[s]; !ok {
			return 0, fmt.Errorf("%s: %q: want an HTTP status code, by number or by Envoy's name such as TooManyRequests", elAt(n, path), s)
		}
	}
	switch {
	case code < 400 || code > 599:
		c.note("%s: %d: Envoy answers 429 for a status below 400, and so does the policy", path, code)
		return 0, nil
	case code == 429:
		return 0, nil // the default of both
	}
	return code, nil
}

// elEnvoyStatusCodes are envoy.type.v3.StatusCode's names.
var elEnvoyStatusCodes = map[string]int{
	"Continue": 100, "OK": 200, "Created": 201, "Accepted": 202, "NonAuthoritativeInformation": 203,
	"NoContent": 204, "ResetContent": 205, "PartialContent": 206, "MultiStatus": 207, "AlreadyReported": 208,
	"IMUsed": 226, "MultipleChoices": 300, "MovedPermanently": 301, "Found": 302, "SeeOther": 303,
	"NotModified": 304, "UseProxy": 305, "TemporaryRedirect": 307, "PermanentRedirect": 308,
	"BadRequest": 400, "Unauthorized": 401, "PaymentRequired": 402, "Forbidden": 403, "NotFound": 404,
	"MethodNotAllowed": 405, "NotAcceptable": 406, "ProxyAuthenticationRequired": 407, "RequestTimeout": 408,
	"Conflict": 409, "Gone": 410, "LengthRequired": 411, "PreconditionFailed": 412, "PayloadTooLarge": 413,
	"URITooLong": 414, "UnsupportedMediaType": 415, "RangeNotSatisfiable": 416, "ExpectationFailed": 417,
	"MisdirectedRequest": 421, "UnprocessableEntity": 422, "Locked": 423, "FailedDependency": 424,
	"UpgradeRequired": 426, "PreconditionRequired": 428, "TooManyRequests": 429, "RequestHeaderFieldsTooLarge": 431,
	"InternalServerError": 500, "NotImplemented": 501, "BadGateway": 502, "ServiceUnavailable": 503,
	"GatewayTimeout": 504, "HTTPVersionNotSupported": 505, "VariantAlsoNegotiates": 506,
	"InsufficientStorage": 507, "LoopDetected": 508, "NotExtended": 510, "NetworkAuthenticationRequired": 511,
}
