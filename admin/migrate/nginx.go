package migrate

import (
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// NginxOptions are the choices a conversion of an nginx configuration
// cannot read from it.
type NginxOptions struct {
	// Taken are rule and policy names the conversion must not use: those
	// of the policy its output is added to (AddTo).
	Taken []string
	// Files is the configuration's directory, where its include
	// directives are followed (nginx_include.go): relative names are
	// read from it, and absolute names under ConfDir. Without it an
	// include is noted, not followed.
	Files fs.FS
	// ConfDir is the directory Files stands for, as the configuration's
	// absolute include names write it (default "/etc/nginx").
	ConfDir string
}

// DefaultNginxConfDir is where distributions keep nginx's configuration.
const DefaultNginxConfDir = "/etc/nginx"

// nginxDoc names the input in errors.
const nginxDoc = "nginx.conf"

// Nginx converts the limit_req and limit_conn limits of an nginx
// configuration (nginx.conf, or a part of its http block such as a
// conf.d file) into a policy. Each zone becomes a policy whose rules are
// the places nginx applies it: a server's names as a host condition and a
// location as a path condition, in the order nginx selects locations
// (exact, then the longest prefix, with the regular expressions tested
// before a prefix that is not ^~), with an unlimited rule where nginx
// would select a location that does not use the zone. Zones whose rules
// cannot apply to the same request share one policy. include directives
// are not followed (a Note names them). Errors name the line
// ("nginx.conf: line 12: unexpected }"); docs/migrating.md describes the
// mapping.
func Nginx(conf []byte, opt NginxOptions) (Result, error) {
	fail := func(err error) (Result, error) { return Result{}, &InputError{Input: "config", Err: err} }
	if len(conf) > maxInput {
		return fail(fmt.Errorf("%s: %d bytes, more than the %d a conversion reads", nginxDoc, len(conf), maxInput))
	}
	top, err := parseNginxConf(conf, "")
	if err != nil {
		return fail(err)
	}
	if opt.Files != nil {
		if opt.ConfDir == "" {
			opt.ConfDir = DefaultNginxConfDir
		}
		in := &ngxIncluder{files: opt.Files, confDir: opt.ConfDir, bytes: len(conf)}
		if top, err = in.expand(top, 0); err != nil {
			return fail(err)
		}
	}
	c := newConverter(opt.Taken)
	r := &ngxReader{c: c, zones: map[string]*ngxZone{}, vars: map[string]*ngxVarDef{}, sets: map[string]ngxPos{},
		unfollowed: "this conversion reads one file: run ratelimit-admin migrate nginx -f nginx.conf, which follows includes, or put the included files' text in place of their include lines"}
	if opt.Files != nil {
		r.unfollowed = "it is outside the configuration's directory " + opt.ConfDir + " (-conf-dir): the limits it holds are not converted"
	}
	if err := r.read(top); err != nil {
		return fail(err)
	}
	res, err := (&ngxBuilder{r: r, c: c, spots: map[*ngxServer][]ngxSpot{}}).result()
	if err != nil {
		return fail(err)
	}
	return res, nil
}

func lineErr(at ngxPos, format string, args ...any) error {
	return fmt.Errorf("%s: line %d: %s", at.doc(), at.n, fmt.Sprintf(format, args...))
}

// ngxBucketConfig is a token bucket's algorithm_config with delayed
// admission.
type ngxBucketConfig struct {
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           int     `json:"burst"`
	MaxDelayMS      int     `json:"max_delay_ms,omitempty"`
}

// ngxBucket is limit_req's token bucket (docs/migrating.md, "nginx
// limit_req"): nginx admits 1 + burst requests at one instant (burst=B
// nodelay), or 1 + delay and holds the rest (delay=D), or holds all but
// the first (no nodelay), each held request sent 1/rate after the one
// before. Sluice's burst is what nginx admits at once (at least the rate,
// which Sluice requires), and max_delay_ms lets it hold the rest, so that
// both take 1 + B requests at one instant.
func ngxBucket(rate float64, q *ngxReq) (cfg ngxBucketConfig, raisedFrom int, clampedFrom int) {
	atOnce := 1
	switch {
	case q.delay < 0:
		atOnce += q.burst
	case q.delay > 0:
		atOnce += min(q.delay, q.burst)
	}
	cfg = ngxBucketConfig{TokensPerSecond: rate, Burst: atOnce}
	if float64(atOnce) < rate {
		cfg.Burst, raisedFrom = int(math.Ceil(rate)), atOnce
	}
	if held := q.burst + 1 - cfg.Burst; held > 0 {
		ms := int(math.Ceil(float64(held) * 1000 / rate))
		if ms > policy.MaxDelayMS {
			ms, clampedFrom = policy.MaxDelayMS, ms
		}
		cfg.MaxDelayMS = ms
	}
	return cfg, raisedFrom, clampedFrom
}

type ngxOut struct {
	RejectStatus int         `json:"reject_status,omitempty"`
	Policies     []outPolicy `json:"policies"`
}

func (b *ngxBuilder) result() (Result, error) {
	if err := b.checkZones(); err != nil {
		return Result{}, err
	}
	groups, err := b.hostGroups()
	if err != nil {
		return Result{}, err
	}
	b.groups = groups
	for _, g := range groups {
		if _, done := b.spots[g.server]; done {
			continue
		}
		if b.spots[g.server], err = b.serverSpots(g.server); err != nil {
			return Result{}, err
		}
	}
	var pols []*ngxPolicy
	keys := map[*ngxZone]ngxKey{}
	for _, z := range b.r.zoneList {
		rules, err := b.zoneRules(z)
		if err != nil {
			return Result{}, err
		}
		rules = simplify(rules)
		if !slices.ContainsFunc(rules, func(r *ngxRule) bool { return r.limit }) {
			b.c.note("zone %s (%s) limits no request: no limit_req or limit_conn that applies uses it", z.name, z.line)
			continue
		}
		k, err := b.key(z)
		if err != nil {
			return Result{}, err
		}
		if k.never != "" {
			b.c.note("zone %s (%s) limits no request: %s, and nginx does not limit a request whose key is empty", z.name, z.line, k.never)
			continue
		}
		keys[z] = k
		pols = append(pols, &ngxPolicy{zones: []*ngxZone{z}, rules: rules})
	}
	if len(pols) == 0 {
		return Result{}, fmt.Errorf("%s: nothing to convert: no limit_req or limit_conn applies to a request", nginxDoc)
	}
	out, err := b.emit(mergeDisjoint(pols), keys)
	if err != nil {
		return Result{}, err
	}
	b.generalNotes(pols)
	return b.c.policyOf(out)
}

// checkZones checks that every limit names a zone of its kind.
func (b *ngxBuilder) checkZones() error {
	check := func(c *ngxConf) error {
		for _, q := range c.reqs {
			z := b.r.zones[q.zone]
			switch {
			case z == nil:
				return lineErr(q.line, "limit_req zone=%s: no limit_req_zone defines it; add the http block's limit_req_zone lines to the input", q.zone)
			case z.conn:
				return lineErr(q.line, "limit_req zone=%s: %s is a limit_conn_zone (%s)", q.zone, q.zone, z.line)
			}
		}
		for _, x := range c.conns {
			z := b.r.zones[x.zone]
			switch {
			case z == nil:
				return lineErr(x.line, "limit_conn %s: no limit_conn_zone defines it; add the http block's limit_conn_zone lines to the input", x.zone)
			case !z.conn:
				return lineErr(x.line, "limit_conn %s: %s is a limit_req_zone (%s)", x.zone, x.zone, z.line)
			}
		}
		return nil
	}
	var locs func([]*ngxLoc) error
	locs = func(ls []*ngxLoc) error {
		for _, l := range ls {
			if err := check(&l.conf); err != nil {
				return err
			}
			if err := locs(l.kids); err != nil {
				return err
			}
		}
		return nil
	}
	if err := check(&b.r.http); err != nil {
		return err
	}
	for _, s := range b.r.servers {
		if err := check(&s.conf); err != nil {
			return err
		}
		if err := locs(s.locs); err != nil {
			return err
		}
	}
	return nil
}

// emit writes the policies: names, matches, algorithms, the status.
func (b *ngxBuilder) emit(pols []*ngxPolicy, keys map[*ngxZone]ngxKey) (ngxOut, error) {
	var out ngxOut
	statuses := map[int][]string{}
	var order []int
	for _, p := range pols {
		op := outPolicy{Name: b.policyName(p, len(pols))}
		for _, z := range p.zones {
			rules := slices.DeleteFunc(slices.Clone(p.rules), func(r *ngxRule) bool { return r.zone != z })
			names := b.ruleNames(z, rules)
			for i, r := range rules {
				o, err := b.rule(r, names[i], keys[z])
				if err != nil {
					return out, err
				}
				if r.limit && !r.dry {
					if _, seen := statuses[r.status]; !seen {
						order = append(order, r.status)
					}
					statuses[r.status] = append(statuses[r.status], o.Name)
				}
				op.Rules = append(op.Rules, o)
			}
			b.zoneNotes(z, rules, names)
		}
		out.Policies = append(out.Policies, op)
	}
	out.RejectStatus = b.rejectStatus(statuses, order)
	ownStatus := map[string]int{}
	for s, names := range statuses {
		if s != out.RejectStatus && !(out.RejectStatus == 0 && s == policy.DefaultRejectStatus) {
			for _, n := range names {
				ownStatus[n] = s
			}
		}
	}
	for i := range out.Policies {
		for j := range out.Policies[i].Rules {
			r := &out.Policies[i].Rules[j]
			r.RejectStatus = ownStatus[r.Name]
		}
	}
	return out, nil
}

func (b *ngxBuilder) policyName(p *ngxPolicy, n int) string {
	switch {
	case len(p.zones) == 1:
		return b.c.pols.take(p.zones[0].name)
	case n == 1:
		return b.c.pols.take(policy.DefaultPolicyName)
	}
	names := make([]string, len(p.zones))
	for i, z := range p.zones {
		names[i] = z.name
	}
	return b.c.pols.take(strings.Join(names, "-"))
}

// ruleNames names a zone's rules: the zone's name for its only limit
// rule, else the zone's name with the server's (when several) and the
// location's.
func (b *ngxBuilder) ruleNames(z *ngxZone, rules []*ngxRule) []string {
	limits, groups := 0, map[*ngxGroup]bool{}
	for _, r := range rules {
		groups[r.group] = true
		if r.limit {
			limits++
		}
	}
	names := make([]string, len(rules))
	for i, r := range rules {
		parts := []string{z.name}
		if !(r.limit && limits == 1) {
			if len(groups) > 1 {
				parts = append(parts, r.group.label())
			}
			if l := r.spot.path.label(); l != "" {
				parts = append(parts, l)
			}
		}
		names[i] = b.c.rules.take(strings.Join(parts, "-"))
	}
	return names
}

func (b *ngxBuilder) rule(r *ngxRule, name string, key ngxKey) (outRule, error) {
	if p := &r.spot.path; p.regex != "" && p.re == nil {
		return outRule{}, lineErr(p.loc.line, "%s: %v: Sluice's regular expressions are RE2 (no look-around or back-references); rewrite the location or write its rule by hand", p.loc, p.loc.reErr)
	}
	o := outRule{Name: name}
	m := map[string]any{}
	if h := r.group.host.condition(); h != nil {
		m["host"] = h
	}
	r.spot.path.addTo(m)
	switch {
	case !r.limit:
		o.Action = policy.ActionUnlimited
	case r.req != nil:
		cfg, _, _ := ngxBucket(r.zone.rate, r.req)
		o.Algorithm, o.AlgorithmConfig = policy.AlgorithmTokenBucket, &cfg
	default:
		o.Algorithm, o.AlgorithmConfig = policy.AlgorithmConcurrency, &windowConfig{Limit: r.conn.n}
	}
	if r.limit {
		for k, v := range key.match {
			m[k] = v
		}
		o.LimitKeys = key.sources
		if r.dry {
			o.Mode = string(policy.ModeShadow)
		}
	}
	if len(m) > 0 {
		o.Match = m
	}
	return o, nil
}

// rejectStatus is the status most enforced limit rules reject with
// (nginx's per-context limit_req_status and limit_conn_status), the
// top-level reject_status; 0 for Sluice's default, 429. emit gives the
// other rules their own.
func (b *ngxBuilder) rejectStatus(statuses map[int][]string, order []int) int {
	if len(order) == 0 {
		return 0
	}
	best := order[0]
	for _, s := range order {
		if len(statuses[s]) > len(statuses[best]) {
			best = s
		}
	}
	if best == policy.DefaultRejectStatus {
		return 0
	}
	return best
}

// zoneNotes says what differs for one zone's rules.
func (b *ngxBuilder) zoneNotes(z *ngxZone, rules []*ngxRule, names []string) {
	var limits []string
	for i, r := range rules {
		if !r.limit {
			continue
		}
		limits = append(limits, names[i])
		if r.req == nil {
			continue
		}
		cfg, raised, clamped := ngxBucket(z.rate, r.req)
		if raised > 0 {
			b.c.noteOnce(fmt.Sprintf("%s: zone %s admits %d request(s) at once at rate=%s; Sluice's burst is at least its rate, so rule %s admits %d at once where nginx paces them", r.req.line, z.name, raised, z.rateText, names[i], cfg.Burst))
		}
		if clamped > 0 {
			b.c.noteOnce(fmt.Sprintf("%s: zone %s holds requests up to %d ms; Sluice holds at most %d ms (max_delay_ms), so rule %s rejects those nginx would send later", r.req.line, z.name, clamped, policy.MaxDelayMS, names[i]))
		}
	}
	if len(limits) > 1 {
		b.c.note("zone %s is one state per key in nginx, whichever location uses it; its rules %s each keep their own buckets, so a client gets the limit at each", z.name, strings.Join(limits, ", "))
	}
	const stateBytes = 64 // nginx: "One megabyte zone can keep about 16 thousand 64-byte states"
	if n := z.size / stateBytes; n > policy.DefaultMaxKeys {
		b.bigZones = append(b.bigZones, fmt.Sprintf("%s (about %d)", z.name, n))
	}
	if z.sync {
		b.c.note("zone %s is synchronized across NGINX Plus instances (sync); these rules hold per Envoy process: for a limit across every Envoy, make them \"scope\": \"global\" with a fleet (docs/fleet.md; a global rule has no max_delay_ms)", z.name)
	}
}

// generalNotes say what differs for the whole conversion.
func (b *ngxBuilder) generalNotes(pols []*ngxPolicy) {
	r := b.r
	if len(r.includes) > 0 {
		b.c.note("include is not followed: %s; %s", strings.Join(r.includes, ", "), r.unfollowed)
	}
	if len(b.bigZones) > 0 {
		b.c.note("zones keep more states in nginx than a Sluice rule keeps clients exactly by default (%d; beyond them it shares buckets, never letting a client go unlimited): %s; raise the rules' max_keys (up to %d) to keep as many", policy.DefaultMaxKeys, strings.Join(b.bigZones, ", "), policy.MaxMaxKeys)
	}
	if len(r.rewrites) > 0 {
		b.c.note("rewrite (%s) changes the URI nginx selects a location by, or redirects before the limits run; Sluice matches the request's own path", ngxLines(r.rewrites))
	}
	paths, conns, hosts := false, false, false
	var returns []ngxPos
	for _, p := range pols {
		for _, rule := range p.rules {
			pa := &rule.spot.path
			paths = paths || pa.isExact || pa.prefix != "" || pa.regex != ""
			conns = conns || rule.conn != nil
			hosts = hosts || !rule.group.host.any()
			var line ngxPos
			switch l, s := rule.spot.loc, rule.group.server; {
			case s.redirect() && s.eff.limits():
				line = s.conf.returnLine
			case l != nil && l.eff.returns && l.eff.limits():
				line = l.conf.returnLine
			}
			if line.known() && !slices.Contains(returns, line) {
				returns = append(returns, line)
			}
		}
	}
	if len(returns) > 0 {
		b.c.note("the return directives at %s answer before nginx's limits run: their requests are not limited here either", ngxLines(returns))
	}
	if paths {
		b.c.noteOnce("nginx selects locations by the decoded, normalized URI (%XX decoded, // merged, dot segments resolved); Sluice's path conditions see the path as the request sends it: let Envoy normalize paths (normalize_path, merge_slashes) to match")
	}
	if hosts {
		if ports := b.ports(); len(ports) > 0 {
			b.c.note("servers listen on %s: a request's host then carries the port (example.com:8080), which Sluice's host conditions compare as sent, where nginx ignores it; and Sluice does not tell servers of different ports apart", strings.Join(ports, ", "))
		}
	}
	if conns {
		b.c.noteOnce("limit_conn counts connections (HTTP/1.1) or requests in flight (HTTP/2); Sluice's concurrency rules count requests in flight: a keep-alive connection holds a place only while a request is on it")
	}
	b.c.noteOnce("the limits hold per Envoy process, as nginx's per nginx instance (its zones are shared by its workers)")
}

// ports are the listen ports other than 80 and 443.
func (b *ngxBuilder) ports() []string {
	var out []string
	for _, s := range b.r.servers {
		for _, p := range s.ports {
			if p != "80" && p != "443" && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}
