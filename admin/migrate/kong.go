package migrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// KongOptions are the choices a conversion of Kong's configuration cannot
// read from it.
type KongOptions struct {
	// ConsumerKey is the key source holding what Kong knew a consumer by,
	// its key-auth key: limit_by consumer and credential key on it, and a
	// consumer's own plugin applies to requests whose value is one of that
	// consumer's keyauth_credentials. Default "header:<the first key_names
	// of the first key-auth plugin in the file>", else "header:apikey"
	// (key-auth's default).
	ConsumerKey string
	// FleetCluster is the fleet block's cluster when a plugin counts in
	// Redis or Kong's database (policy redis or cluster; default
	// "sluice_rls", the cluster envoy.yaml and the chart define).
	FleetCluster string
	// Taken are rule and policy names the conversion must not use: those
	// of the policy its output is added to (AddTo).
	Taken []string
}

// Kong converts the rate-limiting plugins of Kong's declarative
// configuration (kong.yaml of DB-less Kong or decK, YAML or JSON:
// services with their routes and plugins, routes, consumers with their
// plugins and keyauth_credentials, plugins referring to them by name or
// id), or of a Kubernetes YAML stream of the Kong Ingress Controller's
// KongPlugin and KongClusterPlugin objects, into a policy
// (docs/migrating.md, "Kong rate-limiting"). Kong runs one rate-limiting
// instance per request, the most specific for its consumer, route and
// service; so each period (second to year) is one policy whose rules are
// ordered as Kong picks the instance, each matching its instance's routes
// (all requests for a global one, a consumer's keys for a consumer's).
// Errors name the field (services[0].plugins[1].config.minute).
func Kong(doc []byte, opt KongOptions) (Result, error) {
	const input = "config"
	if len(doc) > maxInput {
		return Result{}, &InputError{input, fmt.Errorf("config: %d bytes, more than the %d a conversion reads", len(doc), maxInput)}
	}
	if opt.FleetCluster == "" {
		opt.FleetCluster = "sluice_rls"
	}
	docs, err := kongDocuments(doc)
	if err != nil {
		return Result{}, &InputError{input, err}
	}
	k := &kongConv{
		converter: newConverter(opt.Taken),
		opts:      opt,
		svcByRef:  map[string]*kongSvc{}, rtByRef: map[string]*kongRt{}, consByRef: map[string]*kongCons{},
		scopes: map[string]string{},
	}
	kube := kongIsKubernetes(docs)
	if kube {
		err = k.readKubernetes(docs)
	} else {
		err = k.readDeclarative(docs)
	}
	if err != nil {
		return Result{}, &InputError{input, err}
	}
	if err := k.chooseConsumerKey(); err != nil {
		if k.opts.ConsumerKey != "" {
			return Result{}, &InputError{"consumer_key", err}
		}
		return Result{}, &InputError{input, err}
	}
	if len(k.limits) == 0 {
		return Result{}, &InputError{input, k.nothingToConvert()}
	}
	k.chooseReply()
	if kube && !k.scoped {
		err = k.buildKubernetes()
	} else {
		err = k.buildDeclarative()
	}
	if err != nil {
		return Result{}, &InputError{input, err}
	}
	return k.result()
}

// kongFile is the part of Kong's declarative configuration the conversion
// reads; other entities and fields are not read.
type kongFile struct {
	FormatVersion      string           `yaml:"_format_version"`
	Services           []kongService    `yaml:"services"`
	Routes             []kongRoute      `yaml:"routes"`
	Consumers          []kongConsumer   `yaml:"consumers"`
	Plugins            []kongPlugin     `yaml:"plugins"`
	KeyauthCredentials []kongCredential `yaml:"keyauth_credentials"`
	ConsumerGroups     []struct {
		Name    string       `yaml:"name"`
		Plugins []kongPlugin `yaml:"plugins"`
	} `yaml:"consumer_groups"`
}

type kongService struct {
	ID      string       `yaml:"id"`
	Name    string       `yaml:"name"`
	Routes  []kongRoute  `yaml:"routes"`
	Plugins []kongPlugin `yaml:"plugins"`
}

type kongRoute struct {
	ID            string              `yaml:"id"`
	Name          string              `yaml:"name"`
	Service       kongRef             `yaml:"service"`
	Paths         []string            `yaml:"paths"`
	Hosts         []string            `yaml:"hosts"`
	Methods       []string            `yaml:"methods"`
	Headers       map[string][]string `yaml:"headers"`
	SNIs          []string            `yaml:"snis"`
	Sources       []any               `yaml:"sources"`
	Destinations  []any               `yaml:"destinations"`
	Expression    string              `yaml:"expression"`
	RegexPriority int                 `yaml:"regex_priority"`
	Plugins       []kongPlugin        `yaml:"plugins"`
}

type kongConsumer struct {
	ID                 string           `yaml:"id"`
	Username           string           `yaml:"username"`
	CustomID           string           `yaml:"custom_id"`
	KeyauthCredentials []kongCredential `yaml:"keyauth_credentials"`
	Plugins            []kongPlugin     `yaml:"plugins"`
}

type kongCredential struct {
	Key      string  `yaml:"key"`
	Consumer kongRef `yaml:"consumer"`
}

type kongPlugin struct {
	Name          string    `yaml:"name"`
	InstanceName  string    `yaml:"instance_name"`
	Enabled       *bool     `yaml:"enabled"`
	Config        yaml.Node `yaml:"config"`
	Service       kongRef   `yaml:"service"`
	Route         kongRef   `yaml:"route"`
	Consumer      kongRef   `yaml:"consumer"`
	ConsumerGroup kongRef   `yaml:"consumer_group"`
	line          int
}

func (p *kongPlugin) UnmarshalYAML(n *yaml.Node) error {
	type plain kongPlugin
	if err := n.Decode((*plain)(p)); err != nil {
		return err
	}
	p.line = n.Line
	return nil
}

// kongRef is a reference to another entity: its name or id (DB-less
// Kong's form), or {name: ...} / {id: ...} (decK's).
type kongRef struct{ ID, Name string }

func (r *kongRef) UnmarshalYAML(n *yaml.Node) error {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return nil
	case n.Kind == yaml.ScalarNode:
		r.Name = n.Value
		return nil
	case n.Kind == yaml.MappingNode:
		var m struct {
			ID       string `yaml:"id"`
			Name     string `yaml:"name"`
			Username string `yaml:"username"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		r.ID, r.Name = m.ID, m.Name
		if r.Name == "" {
			r.Name = m.Username
		}
		return nil
	}
	return fmt.Errorf("line %d: want a name, an id or {name: ...}", n.Line)
}

func (r kongRef) set() bool { return r.ID != "" || r.Name != "" }

func (r kongRef) String() string {
	if r.Name != "" {
		return r.Name
	}
	return r.ID
}

// kongDocuments reads the YAML (or JSON) stream's documents, empty ones
// left out.
func kongDocuments(doc []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var out []*yaml.Node
	for i := 1; ; i++ {
		n := new(yaml.Node)
		err := dec.Decode(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("config: document %d: %s", i, yamlError(err))
		}
		if len(n.Content) == 1 && n.Content[0].Tag != "!!null" {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("config: empty; give kong.yaml (decK's or DB-less Kong's declarative configuration) or the KongPlugin objects")
	}
	return out, nil
}

// kongPeriods are Kong's periods, shortest first: the order of the
// policies.
var kongPeriods = []string{"second", "minute", "hour", "day", "month", "year"}

// kongWindow: Kong counts the shorter periods in windows aligned to the
// UTC clock, as Sluice's fixed windows are; its month and year are
// calendar ones from the 1st and January 1st in UTC
// (kong/tools/timestamp.lua), Sluice's quota periods.
var kongWindow = map[string]int{"second": 1, "minute": 60, "hour": 3600, "day": 86400}

// kongLimit is one rate-limiting plugin's configuration, Kong's defaults
// filled in.
type kongLimit struct {
	limits  map[string]int // period: requests (Kong's number, rounded up)
	limitBy string
	header  string // header_name, lower-cased
	path    string
	policy  string
	hide    bool
	code    int
	message string
	// advanced: a rate-limiting-advanced plugin (kong_advanced.go), whose
	// periods are windows of any length, fixed or sliding.
	advanced  bool
	windows   map[string]int // advanced: period -> window seconds
	sliding   bool
	noPenalty bool // advanced: disable_penalty, rejected requests not counted
	// throttle: advanced, throttling enabled (kong_advanced.go): requests
	// over the limit wait their turn instead of being refused.
	throttle *kongThrottle
}

func (l *kongLimit) global() bool { return l.policy == "redis" || l.policy == "cluster" }

// kongRedisFields are Kong's fields that hold its Redis connection: in
// fleet mode the admin holds that connection (its -redis-* flags).
var kongRedisFields = map[string]bool{
	"redis": true, "redis_host": true, "redis_port": true, "redis_password": true, "redis_username": true,
	"redis_ssl": true, "redis_ssl_verify": true, "redis_server_name": true, "redis_timeout": true, "redis_database": true,
}

var kongLimitBy = []string{"consumer", "credential", "ip", "service", "header", "path"}

// headerToken is an HTTP field name (RFC 9110 token).
var headerToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// readLimit reads a rate-limiting plugin's config (kong/plugins/
// rate-limiting/schema.lua): every field Kong knows, null being unset as
// in decK's dumps; an unknown field is an error.
func (k *kongConv) readLimit(path string, n *yaml.Node) (kongLimit, error) {
	lim := kongLimit{limits: map[string]int{}, limitBy: "consumer", policy: "local", code: 429, message: "API rate limit exceeded"}
	n = kongDeref(n)
	if n.Kind == 0 || n.Tag == "!!null" {
		return lim, fmt.Errorf("%s: missing; Kong needs at least one of second, minute, hour, day, month and year", path)
	}
	if err := kongEachField(path, n, func(field, name string, v *yaml.Node) error {
		return k.limitField(&lim, field, name, v)
	}); err != nil {
		return lim, err
	}
	switch {
	case len(lim.limits) == 0:
		return lim, fmt.Errorf("%s: none of second, minute, hour, day, month and year is set; Kong refuses such a plugin", path)
	case lim.limitBy == "header" && lim.header == "":
		return lim, fmt.Errorf("%s.header_name: required with limit_by header", path)
	case lim.limitBy == "path" && lim.path == "":
		return lim, fmt.Errorf("%s.path: required with limit_by path", path)
	}
	return lim, nil
}

// kongEachField calls f for each field of a plugin's config mapping n that
// is set (null is unset, as in decK's dumps), with the field's name for
// errors ("plugins[0].config.minute (line 7)"); a field set twice is an
// error.
func kongEachField(path string, n *yaml.Node, f func(field, name string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s (line %d): want a mapping of the plugin's fields", path, n.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, v := n.Content[i], kongDeref(n.Content[i+1])
		field := fmt.Sprintf("%s.%s (line %d)", path, key.Value, key.Line)
		if seen[key.Value] {
			return fmt.Errorf("%s: set twice", field)
		}
		seen[key.Value] = true
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if err := f(field, key.Value, v); err != nil {
			return err
		}
	}
	return nil
}

// limitField reads one field of a rate-limiting config.
func (k *kongConv) limitField(lim *kongLimit, field, name string, v *yaml.Node) error {
	var err error
	switch name {
	case "second", "minute", "hour", "day", "month", "year":
		var f float64
		if f, err = kongNumber(field, v); err != nil {
			return err
		}
		if f <= 0 || f > 1e12 {
			return fmt.Errorf("%s: %v; want more than 0 and at most 1e12", field, f)
		}
		// Kong admits while the count is below the limit: 2.5 admits 3.
		lim.limits[name] = int(math.Ceil(f))
		if f != math.Ceil(f) {
			k.note("%s: %v is %d whole requests, as Kong counts", field, f, lim.limits[name])
		}
	case "limit_by":
		if lim.limitBy, err = kongString(field, v); err == nil && !slices.Contains(kongLimitBy, lim.limitBy) {
			err = fmt.Errorf("%s: %q; want one of %s", field, lim.limitBy, strings.Join(kongLimitBy, ", "))
		}
	case "header_name":
		if lim.header, err = kongString(field, v); err == nil && !headerToken.MatchString(lim.header) {
			err = fmt.Errorf("%s: %q is not a header name", field, lim.header)
		}
		lim.header = strings.ToLower(lim.header)
	case "path":
		if lim.path, err = kongString(field, v); err == nil && !strings.HasPrefix(lim.path, "/") {
			err = fmt.Errorf("%s: %q; want a path starting with /", field, lim.path)
		}
	case "policy":
		if lim.policy, err = kongString(field, v); err == nil && lim.policy != "local" && lim.policy != "redis" && lim.policy != "cluster" {
			err = fmt.Errorf("%s: %q; want local, redis or cluster", field, lim.policy)
		}
	case "hide_client_headers":
		lim.hide, err = kongBool(field, v)
	case "error_code":
		var f float64
		if f, err = kongNumber(field, v); err == nil && (f != math.Trunc(f) || f < 400 || f > 599) {
			err = fmt.Errorf("%s: %v; Sluice's reject_status is a status from 400 to 599", field, f)
		}
		lim.code = int(f)
	case "error_message":
		lim.message, err = kongString(field, v)
	case "fault_tolerant":
		var on bool
		if on, err = kongBool(field, v); err == nil && !on {
			k.noteOnce("fault_tolerant: false is not converted: Sluice lets requests through when its storage fails, as Kong's default does")
		}
	case "sync_rate":
		_, err = kongNumber(field, v)
	default:
		if !kongRedisFields[name] {
			return fmt.Errorf("%s: not a field of Kong's rate-limiting plugin; remove it or correct its name", field)
		}
	}
	return err
}

func kongDeref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func kongNumber(field string, v *yaml.Node) (float64, error) {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
		return 0, fmt.Errorf("%s: want a number", field)
	}
	var f float64
	if err := v.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s: want a number", field)
	}
	return f, nil
}

func kongString(field string, v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		return "", fmt.Errorf("%s: want a string", field)
	}
	return v.Value, nil
}

func kongBool(field string, v *yaml.Node) (bool, error) {
	var b bool
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&b) != nil {
		return false, fmt.Errorf("%s: want true or false", field)
	}
	return b, nil
}

// kongBody is the body Kong's kong.response.error sends for JSON clients.
func kongBody(message string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"message": message})
	return strings.TrimSuffix(b.String(), "\n")
}

// chooseReply picks the top-level reject_status, reject_body and
// response_headers among the plugins' (the status and message of the
// most): Sluice has one header setting; a plugin of another code or
// message gets its own reject_status or body on its rules.
func (k *kongConv) chooseReply() {
	codes, messages := map[int][]string{}, map[string]int{}
	var order []string
	hiding := []string{}
	for _, rl := range k.limits {
		codes[rl.lim.code] = append(codes[rl.lim.code], rl.path)
		if messages[rl.lim.message]++; messages[rl.lim.message] == 1 {
			order = append(order, rl.lim.message)
		}
		if rl.lim.hide {
			hiding = append(hiding, rl.path)
		}
	}
	k.status = 0
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		if k.status == 0 || len(codes[c]) > len(codes[k.status]) {
			k.status = c
		}
	}
	k.body = order[0]
	for _, m := range order {
		if messages[m] > messages[k.body] {
			k.body = m
		}
	}
	k.showHdrs = len(hiding) < len(k.limits)
	if k.showHdrs && len(hiding) > 0 {
		k.note("hide_client_headers of %s: Sluice sends its RateLimit fields on every response or none; they are sent, as the other plugins do", strings.Join(hiding, ", "))
	}
	if !k.showHdrs {
		k.note(`hide_client_headers: "response_headers": false leaves the RateLimit fields out of allowed responses; rejections still carry them and Retry-After`)
	}
	k.noteOnce("rejections are the JSON body Kong sends to JSON clients; Kong answers other Accept headers in HTML, XML or text")
	if k.showHdrs {
		k.noteOnce("Kong's X-RateLimit-Limit-<period> and X-RateLimit-Remaining-<period> are sent as each rule's limit_headers, and RateLimit-Limit, -Remaining and -Reset of the most restrictive rule (legacy_headers), with the draft-10 RateLimit and RateLimit-Policy; on a rejection, only the rejecting period's pair is sent")
	}
}

type kongOutConfig struct {
	RejectStatus    int          `json:"reject_status,omitempty"`
	RejectBody      string       `json:"reject_body"`
	ResponseHeaders *bool        `json:"response_headers,omitempty"`
	LegacyHeaders   bool         `json:"legacy_headers,omitempty"`
	Fleet           *outFleet    `json:"fleet,omitempty"`
	Policies        []kongPolicy `json:"policies"`
}

// result writes the policy and checks it with the filter's own parser.
func (k *kongConv) result() (Result, error) {
	if len(k.out) == 0 {
		return Result{}, &InputError{"config", fmt.Errorf("config: nothing to convert: no rate-limiting plugin applies to any request")}
	}
	out := kongOutConfig{RejectBody: kongBody(k.body), LegacyHeaders: k.showHdrs, Policies: k.out}
	if k.status != 429 {
		out.RejectStatus = k.status
	}
	if !k.showHdrs {
		out.ResponseHeaders = new(bool)
	}
	k.scopeNotes(&out)
	res, err := k.policyOf(out)
	if err != nil {
		return Result{}, &InputError{"config", err}
	}
	return res, nil
}

// scopeNotes adds the fleet block when a plugin counted in Redis or the
// database, and says what the rules' keys need.
func (k *kongConv) scopeNotes(out *kongOutConfig) {
	redis, ip := false, false
	for _, p := range out.Policies {
		for _, r := range p.Rules {
			out.Fleet = kongFirstFleet(out.Fleet, r.Scope, k.opts.FleetCluster)
			ip = ip || slices.Contains(r.LimitKeys, "ip:address")
		}
	}
	for _, rl := range k.limits {
		redis = redis || rl.lim.policy == "redis"
	}
	if out.Fleet != nil {
		k.noteOnce(fmt.Sprintf(`the plugins with policy redis or cluster are "scope": "global" rules: run the admin as the rate limit service (docs/fleet.md) and give Envoy the cluster %q`, k.opts.FleetCluster))
	}
	if redis {
		k.noteOnce("Kong's redis settings become the admin's: -redis-addrs, -redis-tls, -redis-tls-server-name, SLUICE_REDIS_PASSWORD (docs/fleet.md)")
	}
	if ip {
		k.noteOnce("ip:address is the peer's address; set the policy's xff_trusted_hops to the proxies in front of Envoy, as Kong's trusted_ips and real_ip_header did")
	}
}

func kongFirstFleet(f *outFleet, scope, cluster string) *outFleet {
	if f == nil && scope == "global" {
		return &outFleet{Cluster: cluster}
	}
	return f
}
