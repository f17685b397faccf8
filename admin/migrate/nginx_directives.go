package migrate

// The converter of nginx configurations (nginx.go): what the directives say,
// read into zones, servers and locations with nginx's inheritance.

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ngxZone is a limit_req_zone or limit_conn_zone.
type ngxZone struct {
	name     string
	conn     bool // limit_conn_zone
	key      string
	rate     float64 // requests per second (limit_req_zone)
	rateText string
	size     int64
	sync     bool
	line     ngxPos
}

func (z *ngxZone) directive() string {
	if z.conn {
		return "limit_conn_zone"
	}
	return "limit_req_zone"
}

// ngxReq is a limit_req directive.
type ngxReq struct {
	zone         string
	burst, delay int // delay -1: nodelay
	line         ngxPos
}

// ngxConn is a limit_conn directive.
type ngxConn struct {
	zone string
	n    int
	line ngxPos
}

// ngxConf is what one context (http, server, location) sets itself.
type ngxConf struct {
	reqs       []ngxReq
	reqStatus  int
	reqDry     *bool
	conns      []ngxConn
	connStatus int
	connDry    *bool
	returnLine ngxPos // an unconditional return
}

// ngxEff is a context's configuration once inherited. nginx's
// documentation of limit_req and limit_conn: "These directives are
// inherited from the previous configuration level if and only if there
// are no limit_req [limit_conn] directives defined on the current level";
// the status and dry-run directives are inherited one by one, and apply to
// the limits of the context, wherever those were written.
type ngxEff struct {
	reqs       []ngxReq
	reqStatus  int
	reqDry     bool
	conns      []ngxConn
	connStatus int
	connDry    bool
	returns    bool // the context answers in the rewrite phase, before the limits run
}

func (e ngxEff) with(c ngxConf) ngxEff {
	if c.reqs != nil {
		e.reqs = c.reqs
	}
	if c.reqStatus != 0 {
		e.reqStatus = c.reqStatus
	}
	if c.reqDry != nil {
		e.reqDry = *c.reqDry
	}
	if c.conns != nil {
		e.conns = c.conns
	}
	if c.connStatus != 0 {
		e.connStatus = c.connStatus
	}
	if c.connDry != nil {
		e.connDry = *c.connDry
	}
	// rewrite-module directives are not inherited by nested locations
	e.returns = c.returnLine.known()
	return e
}

func (e *ngxEff) limits() bool { return len(e.reqs)+len(e.conns) > 0 }

// ngxLoc is a location block.
type ngxLoc struct {
	mod, path string // mod: "", "=", "^~", "~", "~*"
	line      ngxPos
	re        *regexp.Regexp // regex locations, as RE2
	reErr     error
	conf      ngxConf
	eff       ngxEff
	kids      []*ngxLoc
}

func (l *ngxLoc) regex() bool  { return l.mod == "~" || l.mod == "~*" }
func (l *ngxLoc) exact() bool  { return l.mod == "=" }
func (l *ngxLoc) prefix() bool { return l.mod == "" || l.mod == "^~" }

func (l *ngxLoc) String() string {
	if l.mod == "" {
		return "location " + l.path
	}
	return "location " + l.mod + " " + l.path
}

// ngxServer is a server block (or, for a part of an http block without
// one, the locations and limits as one server).
type ngxServer struct {
	line     ngxPos
	names    []string
	def      bool // listen ... default_server
	ports    []string
	conf     ngxConf
	eff      ngxEff
	locs     []*ngxLoc
	implicit bool
}

// redirect: the server answers every request with return in its rewrite
// phase, before any limit runs.
func (s *ngxServer) redirect() bool { return s.conf.returnLine.known() }

func (s *ngxServer) String() string {
	if s.implicit {
		return "the configuration"
	}
	if len(s.names) > 0 {
		return fmt.Sprintf("server %s (%s)", s.names[0], s.line)
	}
	return fmt.Sprintf("the server at %s", s.line)
}

// ngxVarDef is a map or geo block defining a variable.
type ngxVarDef struct {
	kind    string // "map" or "geo"
	name    string
	line    ngxPos
	source  string // map: the source value; geo: the address variable ("" for $remote_addr)
	def     string
	entries []ngxVarEntry
	refuse  string // why the block cannot be read as a condition
}

type ngxVarEntry struct {
	key, value      string
	regex, caseless bool
	cidr            netip.Prefix
	line            ngxPos
}

// ngxReader reads the directives into zones, servers and locations.
type ngxReader struct {
	c        *converter
	zones    map[string]*ngxZone
	zoneList []*ngxZone
	vars     map[string]*ngxVarDef
	sets     map[string]ngxPos // variables assigned with set, and where
	http     ngxConf
	servers  []*ngxServer
	stray    []*ngxLoc // locations outside a server, in a part of an http block
	includes []string
	// unfollowed says why includes are not followed (a note).
	unfollowed string
	rewrites   []ngxPos
	realIP     bool
}

func (r *ngxReader) read(top []*ngxDirective) error {
	var http *ngxDirective
	for _, d := range top {
		if d.name != "http" || !d.isBlock {
			continue
		}
		if http != nil {
			return lineErr(d.line, "http is duplicate (also %s)", http.line)
		}
		http = d
	}
	body := top
	if http != nil {
		body = http.block
		for _, d := range top {
			if d != http {
				r.outside(d)
			}
		}
	}
	if err := r.httpBlock(body); err != nil {
		return err
	}
	if len(r.stray) > 0 {
		if len(r.servers) > 0 {
			return lineErr(r.stray[0].line, "%s is outside a server block; put it in its server", r.stray[0])
		}
		r.servers = []*ngxServer{{implicit: true, locs: r.stray}}
	}
	if len(r.servers) == 0 {
		r.servers = []*ngxServer{{implicit: true}}
	}
	base := ngxEff{reqStatus: 503, connStatus: 503}.with(r.http) // nginx's default status: 503
	base.returns = false
	for _, s := range r.servers {
		s.eff = base.with(s.conf)
		inheritLocations(s.locs, s.eff)
	}
	return nil
}

func inheritLocations(locs []*ngxLoc, parent ngxEff) {
	for _, l := range locs {
		l.eff = parent.with(l.conf)
		inheritLocations(l.kids, l.eff)
	}
}

// outside reads a directive of the main context around the http block:
// only includes and limits of other modules (stream) are worth a note.
func (r *ngxReader) outside(d *ngxDirective) {
	if d.name == "include" {
		r.include(d)
		return
	}
	r.other(d)
}

func (r *ngxReader) httpBlock(dirs []*ngxDirective) error {
	for _, d := range dirs {
		done, err := r.common(d, &r.http, "http")
		if err != nil {
			return err
		}
		if done {
			continue
		}
		switch d.name {
		case "limit_req_zone", "limit_conn_zone":
			err = r.zone(d)
		case "map":
			err = r.mapBlock(d)
		case "geo":
			err = r.geoBlock(d)
		case "server":
			if d.isBlock {
				var s *ngxServer
				if s, err = r.server(d); err == nil {
					r.servers = append(r.servers, s)
				}
			}
		case "location":
			var l *ngxLoc
			if l, err = r.location(d, nil); err == nil && l != nil {
				r.stray = append(r.stray, l)
			}
		default:
			r.other(d)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// common reads the directives every context may hold; done is false for
// the others.
func (r *ngxReader) common(d *ngxDirective, conf *ngxConf, ctx string) (done bool, err error) {
	switch d.name {
	case "limit_req":
		return true, r.limitReq(d, conf)
	case "limit_req_status":
		return true, ngxStatus(d, &conf.reqStatus)
	case "limit_req_dry_run":
		return true, ngxFlag(d, &conf.reqDry)
	case "limit_conn":
		return true, r.limitConn(d, conf)
	case "limit_conn_status":
		return true, ngxStatus(d, &conf.connStatus)
	case "limit_conn_dry_run":
		return true, ngxFlag(d, &conf.connDry)
	case "limit_req_log_level", "limit_conn_log_level":
		return true, nil // logging only
	case "include":
		r.include(d)
		return true, nil
	case "set_real_ip_from", "real_ip_header":
		r.realIP = true
		return true, nil
	case "set":
		if len(d.args) > 0 {
			r.sets[strings.ToLower(strings.TrimPrefix(d.args[0], "$"))] = d.line
		}
		return true, nil
	case "return":
		if ctx != "http" && !conf.returnLine.known() {
			conf.returnLine = d.line
		}
		return true, nil
	case "rewrite":
		if n := len(d.args); n >= 2 && d.args[n-1] != "break" {
			r.rewrites = append(r.rewrites, d.line)
		}
		return true, nil
	case "limit_req_zone", "limit_conn_zone", "map", "geo":
		if ctx != "http" {
			return true, lineErr(d.line, "%s is allowed in the http block only", d.name)
		}
	}
	return false, nil
}

// ngxStandardIncludes are files distributions include that never hold
// limits: not worth a note.
var ngxStandardIncludes = regexp.MustCompile(`(^|/)(mime\.types|fastcgi_params|fastcgi\.conf|scgi_params|uwsgi_params|proxy_params|koi-(utf|win)|win-utf)$|modules-enabled/`)

func (r *ngxReader) include(d *ngxDirective) {
	if len(d.args) == 1 && ngxStandardIncludes.MatchString(d.args[0]) {
		return
	}
	r.includes = append(r.includes, fmt.Sprintf("%s (%s)", strings.Join(d.args, " "), d.line))
}

// other is a directive the conversion does not read: a block of another
// kind (if, stream, upstream, ...) is searched for limits to note.
func (r *ngxReader) other(d *ngxDirective) {
	if d.name == "set_real_ip_from" || d.name == "real_ip_header" {
		r.realIP = true
	}
	if d.isBlock {
		if x := findLimit(d.block); x != nil {
			r.c.note("%s: %s inside %s is not converted (nginx applies limit_req and limit_conn of http, server and location only; stream limits are TCP connections)", x.line, x.name, d.name)
		}
	}
}

func findLimit(dirs []*ngxDirective) *ngxDirective {
	for _, d := range dirs {
		if strings.HasPrefix(d.name, "limit_req") || strings.HasPrefix(d.name, "limit_conn") {
			return d
		}
		if x := findLimit(d.block); x != nil {
			return x
		}
	}
	return nil
}

func (r *ngxReader) server(d *ngxDirective) (*ngxServer, error) {
	s := &ngxServer{line: d.line}
	for _, x := range d.block {
		done, err := r.common(x, &s.conf, "server")
		if err != nil {
			return nil, err
		}
		if done {
			continue
		}
		switch x.name {
		case "server_name":
			s.names = append(s.names, x.args...)
		case "listen":
			if len(x.args) > 0 {
				s.ports = append(s.ports, ngxPort(x.args[0]))
			}
			s.def = s.def || slices.Contains(x.args, "default_server") || slices.Contains(x.args, "default")
		case "location":
			l, err := r.location(x, nil)
			if err != nil {
				return nil, err
			}
			if l != nil {
				s.locs = append(s.locs, l)
			}
		default:
			r.other(x)
		}
	}
	if err := checkDuplicateLocations(s.locs); err != nil {
		return nil, err
	}
	return s, nil
}

// ngxPort is the port of a listen address: "80", "127.0.0.1:8080",
// "[::]:443", "8080"; an address without one listens on 80.
func ngxPort(a string) string {
	if _, err := strconv.Atoi(a); err == nil || strings.HasPrefix(a, "unix:") {
		return a
	}
	if strings.HasPrefix(a, "[") {
		if _, port, ok := strings.Cut(a, "]:"); ok {
			return port
		}
		return "80"
	}
	if i := strings.LastIndexByte(a, ':'); i >= 0 {
		return a[i+1:]
	}
	return "80"
}

// location reads a location block; nil for a named location (@name),
// which no request selects by its URI.
func (r *ngxReader) location(d *ngxDirective, parent *ngxLoc) (*ngxLoc, error) {
	if !d.isBlock {
		return nil, lineErr(d.line, "location has no block")
	}
	mod, path, err := ngxLocationArgs(d)
	if err != nil {
		return nil, err
	}
	if mod == "" && strings.HasPrefix(path, "@") {
		if parent != nil {
			return nil, lineErr(d.line, "named location %q can be on the server level only", path)
		}
		return nil, nil
	}
	l := &ngxLoc{mod: mod, path: path, line: d.line}
	if parent != nil {
		if parent.exact() {
			return nil, lineErr(d.line, "%s cannot be inside the exact %s", l, parent)
		}
		if !l.regex() && !strings.HasPrefix(path, parent.path) {
			return nil, lineErr(d.line, "%s is outside %s", l, parent)
		}
	}
	if l.regex() {
		src := path
		if mod == "~*" {
			src = "(?i)" + src
		}
		l.re, l.reErr = regexp.Compile(src)
	}
	for _, x := range d.block {
		done, err := r.common(x, &l.conf, "location")
		if err != nil {
			return nil, err
		}
		if done {
			continue
		}
		if x.name == "location" {
			k, err := r.location(x, l)
			if err != nil {
				return nil, err
			}
			if k != nil {
				l.kids = append(l.kids, k)
			}
			continue
		}
		r.other(x)
	}
	return l, checkDuplicateLocations(l.kids)
}

// ngxLocationArgs reads "location [=|~|~*|^~] uri" (nginx also takes the
// modifier joined to the uri, "=/health").
func ngxLocationArgs(d *ngxDirective) (mod, path string, err error) {
	switch len(d.args) {
	case 2:
		mod, path = d.args[0], d.args[1]
		if !slices.Contains([]string{"=", "~", "~*", "^~"}, mod) {
			return "", "", lineErr(d.line, "location: invalid modifier %q (want =, ~, ~* or ^~)", mod)
		}
	case 1:
		path = d.args[0]
		for _, m := range []string{"=", "^~", "~*", "~"} {
			if strings.HasPrefix(path, m) {
				mod, path = m, path[len(m):]
				break
			}
		}
	default:
		return "", "", lineErr(d.line, "invalid number of arguments in location")
	}
	if path == "" {
		return "", "", lineErr(d.line, "location has an empty URI")
	}
	return mod, path, nil
}

// checkDuplicateLocations refuses two exact or two prefix locations of
// one level with the same URI, as nginx does.
func checkDuplicateLocations(locs []*ngxLoc) error {
	seen := map[string]ngxPos{}
	for _, l := range locs {
		if l.regex() {
			continue
		}
		k := "prefix " + l.path
		if l.exact() {
			k = "exact " + l.path
		}
		if line, dup := seen[k]; dup {
			return lineErr(l.line, "duplicate location %q (also %s)", l.path, line)
		}
		seen[k] = l.line
	}
	return nil
}

func (r *ngxReader) zone(d *ngxDirective) error {
	z := &ngxZone{conn: d.name == "limit_conn_zone", line: d.line, rate: 1, rateText: "1r/s"}
	if len(d.args) < 2 {
		return lineErr(d.line, "invalid number of arguments in %s", d.name)
	}
	z.key = d.args[0]
	for _, a := range d.args[1:] {
		switch {
		case strings.HasPrefix(a, "zone="):
			name, size, ok := strings.Cut(a[len("zone="):], ":")
			n, sizeOK := ngxSize(size)
			if !ok || !sizeOK || name == "" {
				return lineErr(d.line, "%s: invalid zone %q (want zone=NAME:SIZE, e.g. zone=perip:10m)", d.name, a)
			}
			z.name, z.size = name, n
		case !z.conn && strings.HasPrefix(a, "rate="):
			if err := z.parseRate(a); err != nil {
				return lineErr(d.line, "%s: %v", d.name, err)
			}
		case a == "sync": // NGINX Plus: the zone is shared by a cluster
			z.sync = true
		default:
			return lineErr(d.line, "%s: invalid parameter %q", d.name, a)
		}
	}
	if z.name == "" {
		return lineErr(d.line, "%s must have the zone parameter", d.name)
	}
	if prev := r.zones[z.name]; prev != nil {
		return lineErr(d.line, "zone %q is already defined (%s)", z.name, prev.line)
	}
	r.zones[z.name] = z
	r.zoneList = append(r.zoneList, z)
	return nil
}

// parseRate reads rate=Nr/s or rate=Nr/m (a whole number, as nginx
// reads it; without a unit, per second).
func (z *ngxZone) parseRate(a string) error {
	s, scale := a[len("rate="):], 1.0
	switch {
	case strings.HasSuffix(s, "r/s"):
		s = s[:len(s)-3]
	case strings.HasSuffix(s, "r/m"):
		s, scale = s[:len(s)-3], 60
	}
	n, ok := ngxPositive(s)
	if !ok {
		return fmt.Errorf("invalid rate %q (want e.g. rate=10r/s or rate=30r/m)", a)
	}
	// nginx keeps the rate in thousandths of a request per second,
	// rounded down: 10r/m is 0.166 per second.
	z.rate, z.rateText = math.Floor(float64(n)*1000/scale)/1000, a[len("rate="):]
	return nil
}

// ngxPositive reads a whole number from 1 to 10^9 (nginx's ngx_atoi: digits only).
func ngxPositive(s string) (int, bool) {
	if s == "" || len(s) > 10 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0 && n <= 1e9
}

// ngxSize reads a size: bytes, or with k, m or g.
func ngxSize(s string) (int64, bool) {
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			s = s[:len(s)-1]
		}
	}
	n, ok := ngxPositive(s)
	return int64(n) * mult, ok
}

func (r *ngxReader) limitReq(d *ngxDirective, conf *ngxConf) error {
	q := ngxReq{line: d.line}
	for _, a := range d.args {
		var ok bool
		switch {
		case strings.HasPrefix(a, "zone="):
			q.zone, ok = a[len("zone="):], len(a) > len("zone=")
		case strings.HasPrefix(a, "burst="):
			q.burst, ok = ngxPositive(a[len("burst="):])
		case strings.HasPrefix(a, "delay="):
			q.delay, ok = ngxPositive(a[len("delay="):])
		case a == "nodelay":
			q.delay, ok = -1, true
		}
		if !ok {
			return lineErr(d.line, "limit_req: invalid parameter %q (want zone=NAME, burst=N, delay=N or nodelay)", a)
		}
	}
	if q.zone == "" {
		return lineErr(d.line, "limit_req must have the zone parameter")
	}
	for _, x := range conf.reqs {
		if x.zone == q.zone {
			return lineErr(d.line, "limit_req zone=%s is duplicate (also %s)", q.zone, x.line)
		}
	}
	conf.reqs = append(conf.reqs, q)
	return nil
}

func (r *ngxReader) limitConn(d *ngxDirective, conf *ngxConf) error {
	if len(d.args) != 2 {
		return lineErr(d.line, "invalid number of arguments in limit_conn (want limit_conn ZONE N)")
	}
	n, ok := ngxPositive(d.args[1])
	if !ok || n > 65535 {
		return lineErr(d.line, "limit_conn: invalid number of connections %q (1 to 65535)", d.args[1])
	}
	for _, x := range conf.conns {
		if x.zone == d.args[0] {
			return lineErr(d.line, "limit_conn %s is duplicate (also %s)", x.zone, x.line)
		}
	}
	conf.conns = append(conf.conns, ngxConn{zone: d.args[0], n: n, line: d.line})
	return nil
}

func ngxStatus(d *ngxDirective, dst *int) error {
	if len(d.args) != 1 {
		return lineErr(d.line, "invalid number of arguments in %s", d.name)
	}
	n, err := strconv.Atoi(d.args[0])
	if err != nil || n < 400 || n > 599 {
		return lineErr(d.line, "%s %q: want a status from 400 to 599", d.name, d.args[0])
	}
	*dst = n
	return nil
}

func ngxFlag(d *ngxDirective, dst **bool) error {
	if len(d.args) != 1 {
		return lineErr(d.line, "invalid number of arguments in %s", d.name)
	}
	switch strings.ToLower(d.args[0]) {
	case "on", "off":
		on := strings.EqualFold(d.args[0], "on")
		*dst = &on
	default:
		return lineErr(d.line, "%s %q: want on or off", d.name, d.args[0])
	}
	return nil
}

// mapBlock reads "map SOURCE $var { key value; ... }".
func (r *ngxReader) mapBlock(d *ngxDirective) error {
	if !d.isBlock || len(d.args) != 2 {
		return lineErr(d.line, "map: want map SOURCE $VARIABLE { ... }")
	}
	v := &ngxVarDef{kind: "map", line: d.line, source: d.args[0]}
	for _, x := range d.block {
		if len(x.args) == 0 {
			switch x.name {
			case "hostnames":
				v.refuse = "its hostnames matching is not converted"
			case "volatile":
			default:
				return lineErr(x.line, "map: %q has no value", x.name)
			}
			continue
		}
		if len(x.args) != 1 || x.isBlock {
			return lineErr(x.line, "map: want KEY VALUE;")
		}
		switch {
		case x.name == "default":
			v.def = x.args[0]
		case x.name == "include":
			v.refuse = fmt.Sprintf("its entries are in an included file (%s)", x.line)
		default:
			e := ngxVarEntry{key: x.name, value: x.args[0], line: x.line}
			if strings.HasPrefix(e.key, "~") {
				e.regex, e.key = true, e.key[1:]
				if strings.HasPrefix(e.key, "*") {
					e.caseless, e.key = true, e.key[1:]
				}
			} else if strings.HasPrefix(e.key, `\`) {
				e.key = e.key[1:] // a key starting with ~ written \~
			}
			v.entries = append(v.entries, e)
		}
	}
	return r.define(d, v, d.args[1])
}

// geoBlock reads "geo [$address] $var { CIDR value; ... }".
func (r *ngxReader) geoBlock(d *ngxDirective) error {
	if !d.isBlock || len(d.args) < 1 || len(d.args) > 2 {
		return lineErr(d.line, "geo: want geo [$ADDRESS] $VARIABLE { ... }")
	}
	v := &ngxVarDef{kind: "geo", line: d.line}
	if len(d.args) == 2 {
		v.source = d.args[0]
	}
	for _, x := range d.block {
		switch {
		case x.name == "default" && len(x.args) == 1:
			v.def = x.args[0]
		case x.name == "ranges", x.name == "proxy", x.name == "proxy_recursive", x.name == "delete", x.name == "include":
			v.refuse = fmt.Sprintf("its %s (%s) is not converted", x.name, x.line)
		case len(x.args) == 1:
			p, err := netip.ParsePrefix(x.name)
			if err != nil {
				a, err2 := netip.ParseAddr(x.name)
				if err2 != nil {
					return lineErr(x.line, "geo: %q is not an address or CIDR block", x.name)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			v.entries = append(v.entries, ngxVarEntry{key: x.name, value: x.args[0], cidr: p.Masked(), line: x.line})
		default:
			return lineErr(x.line, "geo: want CIDR VALUE;")
		}
	}
	return r.define(d, v, d.args[len(d.args)-1])
}

func (r *ngxReader) define(d *ngxDirective, v *ngxVarDef, variable string) error {
	name, ok := strings.CutPrefix(variable, "$")
	if !ok || name == "" {
		return lineErr(d.line, "%s: %q is not a variable ($name)", d.name, variable)
	}
	v.name = strings.ToLower(name)
	if prev := r.vars[v.name]; prev != nil {
		return lineErr(d.line, "variable $%s is already defined (%s)", v.name, prev.line)
	}
	r.vars[v.name] = v
	return nil
}
