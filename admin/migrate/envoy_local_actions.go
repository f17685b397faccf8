package migrate

// The converter of Envoy's local_ratelimit configurations (envoy_local.go):
// the route actions (rate_limits) that build descriptors.

import (
	"fmt"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

type elRateLimit struct {
	path     string
	stage    int
	disabled bool // a disable_key: local_ratelimit skips the entry
	acts     []elAct
	hits     int    // hits_addend's number (0: one)
	hitsSrc  string // or the cost source its format reads (envoy_ratelimit_hits.go)
}

// What an action puts in the descriptor.
const (
	elActSource        = iota // the value of a request attribute (a Sluice source)
	elActFixed                // a fixed value (generic_key, destination_cluster resolved)
	elActCond                 // a fixed value when conditions hold (header_value_match, query_parameter_value_match)
	elActDestination          // the route's cluster
	elActSourceCluster        // Envoy's --service-cluster, unknown here
)

type elAct struct {
	kind   int
	key    string
	source string         // actSource
	value  string         // actFixed, actCond
	conds  map[string]any // actCond
	skip   bool           // skip_if_absent
	path   string
}

var elRateLimitFields = []string{"actions", "stage", "disable_key", "limit", "hits_addend", "apply_on_stream_done", "x_ratelimit_option"}

// rateLimitList reads a list of route.v3.RateLimit.
func (c *elConv) rateLimitList(n *yaml.Node, path string) ([]elRateLimit, error) {
	if rl, ok := c.limits[path]; ok {
		return rl, nil
	}
	if n = elDeref(n); n != nil && !elIsSequence(n) {
		return nil, fmt.Errorf("%s: want a list of rate limits, each with actions", elAt(n, path))
	}
	var out []elRateLimit
	for i, e := range elItems(n) {
		rl, err := c.rateLimit(e, elIndex(path, i))
		if err != nil {
			return nil, err
		}
		out = append(out, rl)
	}
	c.limits[path] = out
	return out, nil
}

func (c *elConv) rateLimit(n *yaml.Node, path string) (elRateLimit, error) {
	rl := elRateLimit{path: path}
	for _, kv := range elPairs(n) {
		k, v := elSnakeCase(kv[0].Value), kv[1]
		p := elJoin(path, k)
		var err error
		switch k {
		case "actions":
			for j, a := range elItems(v) {
				act, err := c.action(a, elIndex(p, j))
				if err != nil {
					return rl, err
				}
				rl.acts = append(rl.acts, act)
			}
		case "stage":
			rl.stage, err = elIntOf(v, p, 0, 10)
		case "disable_key":
			rl.disabled = elStr(v) != ""
		case "hits_addend":
			if f := elField(v, "format"); f != nil && elField(v, "number") == nil {
				rl.hitsSrc, err = hitsFormat(elAt(f, elJoin(p, "format")), elStr(f))
				break
			}
			if elField(v, "number") == nil {
				return rl, fmt.Errorf("%s: want number or format", elAt(v, p))
			}
			rl.hits, err = elIntOf(elField(v, "number"), elJoin(p, "number"), 0, policy.MaxCost)
		case "limit", "apply_on_stream_done":
			c.noteOnce(fmt.Sprintf("rate_limits' %s is not read: local_ratelimit takes its limits from its descriptors", k))
		case "x_ratelimit_option":
		default:
			err = fmt.Errorf("%s: not a field of a rate limit (%s)", elAt(v, p), strings.Join(elRateLimitFields, ", "))
		}
		if err != nil {
			return rl, err
		}
	}
	if len(rl.acts) == 0 {
		return rl, fmt.Errorf("%s: actions: missing (Envoy requires at least one)", elAt(n, path))
	}
	return rl, nil
}

// action reads one rate limit action.
func (c *elConv) action(n *yaml.Node, path string) (elAct, error) {
	ps := elPairs(n)
	if len(ps) != 1 {
		return elAct{}, fmt.Errorf("%s: want exactly one action", elAt(n, path))
	}
	k, v := elSnakeCase(ps[0][0].Value), ps[0][1]
	p := elJoin(path, k)
	switch k {
	case "request_headers":
		return c.requestHeaders(v, p)
	case "remote_address":
		return elAct{kind: elActSource, key: "remote_address", source: "ip:address", path: p}, nil
	case "masked_remote_address":
		return elMaskedAddress(v, p)
	case "generic_key":
		val := elStr(elField(v, "descriptor_value"))
		if val == "" {
			return elAct{}, fmt.Errorf("%s: descriptor_value: missing", elAt(v, p))
		}
		return elAct{kind: elActFixed, key: elKeyOr(v, "generic_key"), value: val, path: p}, nil
	case "query_parameters":
		name := elStr(elField(v, "query_parameter_name"))
		key := elStr(elField(v, "descriptor_key"))
		if !elQueryName.MatchString(name) || key == "" {
			return elAct{}, fmt.Errorf("%s: query_parameter_name (a parameter name without spaces, &, = or #) and descriptor_key are required", elAt(v, p))
		}
		skip, err := elBoolOf(elField(v, "skip_if_absent"), elJoin(p, "skip_if_absent"))
		return elAct{kind: elActSource, key: key, source: "query:" + name, skip: skip, path: p}, err
	case "header_value_match", "query_parameter_value_match":
		return elValueMatch(v, p, k)
	case "metadata", "dynamic_metadata":
		var m metadataAction
		if err := v.Decode(&m); err != nil {
			return elAct{}, fmt.Errorf("%s: %s", elAt(v, p), yamlError(err))
		}
		e, err := metadataEntry(p, &m)
		return elAct{kind: elActSource, key: e.key, source: e.source, path: p}, err
	case "destination_cluster":
		return elAct{kind: elActDestination, key: "destination_cluster", path: p}, nil
	case "source_cluster":
		c.noteOnce("source_cluster is Envoy's --service-cluster, not known here: the descriptors that name one are taken to name this Envoy's")
		return elAct{kind: elActSourceCluster, key: "source_cluster", path: p}, nil
	}
	return elAct{}, fmt.Errorf("%s: not converted; Sluice reads headers, query parameters, the client address and dynamic metadata (write the rule by hand)", elAt(v, p))
}

// elMaskedAddress reads masked_remote_address: the client's network,
// Sluice's ip:network with the same prefix lengths (Envoy's defaults, 32
// and 128, are the address itself).
func elMaskedAddress(n *yaml.Node, path string) (elAct, error) {
	bits := [2]int{32, 128}
	for i, f := range []string{"v4_prefix_mask_len", "v6_prefix_mask_len"} {
		if v := elField(n, f); v != nil {
			b, err := elIntOf(elWrapped(v), elJoin(path, f), 1, bits[i])
			if err != nil {
				return elAct{}, err
			}
			bits[i] = b
		}
	}
	src := "ip:address"
	if bits != [2]int{32, 128} {
		src = fmt.Sprintf("ip:network:%d:%d", bits[0], bits[1])
	}
	return elAct{kind: elActSource, key: "masked_remote_address", source: src, path: path}, nil
}

func elKeyOr(n *yaml.Node, dflt string) string {
	if k := elStr(elField(n, "descriptor_key")); k != "" {
		return k
	}
	return dflt
}

var (
	elHeaderToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9a-z-]{1,256}$")
	elQueryName   = regexp.MustCompile(`^[^\x00-\x20\x7f&=#]{1,256}$`)
)

func (c *elConv) requestHeaders(n *yaml.Node, path string) (elAct, error) {
	name := strings.ToLower(elStr(elField(n, "header_name")))
	key := elStr(elField(n, "descriptor_key"))
	if name == "" || key == "" {
		return elAct{}, fmt.Errorf("%s: header_name and descriptor_key are required", elAt(n, path))
	}
	skip, err := elBoolOf(elField(n, "skip_if_absent"), elJoin(path, "skip_if_absent"))
	if err != nil {
		return elAct{}, err
	}
	src, err := elHeaderSource(name, elJoin(path, "header_name"))
	if src == "path" {
		c.noteOnce("the :path header is Sluice's path, without the query string, where Envoy's descriptor value has it")
	}
	return elAct{kind: elActSource, key: key, source: src, skip: skip, path: path}, err
}

// elHeaderSource is the Sluice source of a request header.
func elHeaderSource(name, path string) (string, error) {
	switch {
	case name == ":method":
		return "method", nil
	case name == ":authority" || name == "host":
		return "host", nil
	case name == ":path":
		return "path", nil
	case strings.HasPrefix(name, ":") || !elHeaderToken.MatchString(name):
		return "", fmt.Errorf("%s: %q: Sluice reads headers, :method, :authority and :path; write the rule by hand", path, name)
	}
	return "header:" + name, nil
}

// elValueMatch reads header_value_match or query_parameter_value_match: a
// fixed entry when the conditions hold.
func elValueMatch(n *yaml.Node, path, kind string) (elAct, error) {
	listName, dflt, matcher := "headers", "header_match", elHeaderMatcher
	if kind == "query_parameter_value_match" {
		listName, dflt, matcher = "query_parameters", "query_match", elQueryMatcher
	}
	val := elStr(elField(n, "descriptor_value"))
	if val == "" {
		return elAct{}, fmt.Errorf("%s: descriptor_value: missing", elAt(n, path))
	}
	expect := true
	if v := elField(n, "expect_match"); v != nil {
		var err error
		if expect, err = elBoolOf(elWrapped(v), elJoin(path, "expect_match")); err != nil {
			return elAct{}, err
		}
	}
	list := elItems(elField(n, listName))
	if len(list) == 0 {
		return elAct{}, fmt.Errorf("%s: %s: missing (Envoy requires at least one)", elAt(n, path), listName)
	}
	if !expect && len(list) > 1 {
		return elAct{}, fmt.Errorf("%s: expect_match false with several %s: Sluice cannot negate several conditions at once; write the rules by hand", elAt(n, path), listName)
	}
	conds := map[string]any{}
	for i, h := range list {
		p := elIndex(elJoin(path, listName), i)
		src, cond, err := matcher(h, p)
		if err != nil {
			return elAct{}, err
		}
		if !expect {
			cond = elNegate(cond)
		}
		if err := elAddCond(conds, src, cond, p); err != nil {
			return elAct{}, err
		}
	}
	return elAct{kind: elActCond, key: elKeyOr(n, dflt), value: val, conds: conds, path: path}, nil
}
