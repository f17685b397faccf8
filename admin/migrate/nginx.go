package migrate

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// NginxOptions are the choices a conversion of an nginx configuration
// cannot read from it.
type NginxOptions struct {
	// Taken are rule and policy names the conversion must not use: those
	// of the policy its output is added to (AddTo).
	Taken []string
}

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
	top, err := parseNginxConf(conf)
	if err != nil {
		return fail(err)
	}
	c := newConverter(opt.Taken)
	r := &ngxReader{c: c, zones: map[string]*ngxZone{}, vars: map[string]*ngxVarDef{}, sets: map[string]int{}}
	if err := r.read(top); err != nil {
		return fail(err)
	}
	res, err := (&ngxBuilder{r: r, c: c, spots: map[*ngxServer][]ngxSpot{}}).result()
	if err != nil {
		return fail(err)
	}
	return res, nil
}

func lineErr(line int, format string, args ...any) error {
	return fmt.Errorf("%s: line %d: %s", nginxDoc, line, fmt.Sprintf(format, args...))
}

// ---- The configuration's syntax ----

// ngxDirective is one directive: "name args;" or "name args { block }".
type ngxDirective struct {
	name    string
	args    []string
	line    int
	isBlock bool
	block   []*ngxDirective
}

// Bounds on what the parser reads: real configurations nest http, server
// and a few locations, and hold thousands of directives at most.
const (
	ngxMaxDepth      = 32
	ngxMaxDirectives = 100000
)

type ngxToken int

const (
	ngxEOF    ngxToken = iota
	ngxSimple          // a directive ended by ";"
	ngxOpen            // a directive opening a block with "{"
	ngxClose           // "}"
)

// ngxLexer reads directives as nginx's ngx_conf_read_token does: words
// separated by spaces, ";" ending a directive and "{" opening a block
// (even inside a word), "#" starting a comment where a word could start,
// quoted words with backslash escapes, "${" kept in a word.
type ngxLexer struct {
	src        []byte
	pos, line  int
	directives int
}

func parseNginxConf(src []byte) ([]*ngxDirective, error) {
	l := &ngxLexer{src: src, line: 1}
	return l.block(0)
}

func (l *ngxLexer) errorf(format string, args ...any) error {
	return lineErr(l.line, format, args...)
}

func (l *ngxLexer) block(depth int) ([]*ngxDirective, error) {
	var out []*ngxDirective
	for {
		args, line, tok, err := l.next()
		if err != nil {
			return nil, err
		}
		switch tok {
		case ngxEOF:
			if depth > 0 {
				return nil, l.errorf("unexpected end of file, expecting }")
			}
			return out, nil
		case ngxClose:
			if depth == 0 {
				return nil, l.errorf("unexpected }")
			}
			return out, nil
		}
		if l.directives++; l.directives > ngxMaxDirectives {
			return nil, l.errorf("more than %d directives; convert the part of the configuration that holds the limits", ngxMaxDirectives)
		}
		d := &ngxDirective{name: args[0], args: args[1:], line: line}
		if tok == ngxOpen {
			if depth+1 > ngxMaxDepth {
				return nil, l.errorf("blocks nested more than %d deep", ngxMaxDepth)
			}
			d.isBlock = true
			if d.block, err = l.block(depth + 1); err != nil {
				return nil, err
			}
		}
		out = append(out, d)
	}
}

func ngxSpace(ch byte) bool { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' }

// next reads one directive's words up to its ";" or "{", or a "}".
func (l *ngxLexer) next() (args []string, line int, tok ngxToken, err error) {
	var (
		start                                        int
		lastSpace                                    = true
		needSpace, quoted, dq, sq, variable, comment bool
	)
	for l.pos < len(l.src) {
		ch := l.src[l.pos]
		l.pos++
		if ch == '\n' {
			l.line++
			comment = false
		}
		if comment {
			continue
		}
		if quoted {
			quoted = false
			continue
		}
		if needSpace { // after a closing quote
			switch {
			case ngxSpace(ch):
				lastSpace, needSpace = true, false
				continue
			case ch == ';':
				return args, line, ngxSimple, nil
			case ch == '{':
				return args, line, ngxOpen, nil
			case ch == ')':
				lastSpace, needSpace = true, false
			default:
				return nil, 0, 0, l.errorf("unexpected %s after a quoted word", ngxChar(ch))
			}
		}
		if lastSpace {
			start = l.pos - 1
			if ngxSpace(ch) {
				continue
			}
			switch ch {
			case ';', '{':
				if len(args) == 0 {
					return nil, 0, 0, l.errorf("unexpected %c", ch)
				}
				if ch == '{' {
					return args, line, ngxOpen, nil
				}
				return args, line, ngxSimple, nil
			case '}':
				if len(args) > 0 {
					return nil, 0, 0, l.errorf("unexpected } (a ; is missing before it)")
				}
				return nil, l.line, ngxClose, nil
			case '#':
				comment = true
				continue
			case '\\':
				quoted = true
			case '"':
				start++
				dq = true
			case '\'':
				start++
				sq = true
			case '$':
				variable = true
			}
			if len(args) == 0 {
				line = l.line
			}
			lastSpace = false
			continue
		}
		if ch == '{' && variable {
			continue
		}
		variable = false
		switch {
		case ch == '\\':
			quoted = true
			continue
		case ch == '$':
			variable = true
			continue
		}
		found := false
		switch {
		case dq:
			if ch == '"' {
				dq, needSpace, found = false, true, true
			}
		case sq:
			if ch == '\'' {
				sq, needSpace, found = false, true, true
			}
		case ngxSpace(ch) || ch == ';' || ch == '{':
			lastSpace, found = true, true
		}
		if !found {
			continue
		}
		args = append(args, ngxUnescape(l.src[start:l.pos-1]))
		switch ch {
		case ';':
			return args, line, ngxSimple, nil
		case '{':
			return args, line, ngxOpen, nil
		}
	}
	if len(args) > 0 || !lastSpace {
		return nil, 0, 0, l.errorf("unexpected end of file, expecting ; or }")
	}
	return nil, l.line, ngxEOF, nil
}

func ngxChar(ch byte) string {
	if ch > ' ' && ch < 0x7f {
		return string(ch)
	}
	return strconv.QuoteRune(rune(ch))
}

// ngxUnescape turns \" \' \\ \t \r \n into their characters, as nginx
// does; any other backslash stays.
func ngxUnescape(b []byte) string {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) {
			switch b[i+1] {
			case '"', '\'', '\\':
				i++
			case 't':
				out, i = append(out, '\t'), i+1
				continue
			case 'r':
				out, i = append(out, '\r'), i+1
				continue
			case 'n':
				out, i = append(out, '\n'), i+1
				continue
			}
		}
		out = append(out, b[i])
	}
	return string(out)
}

// ---- What the directives say ----

// ngxZone is a limit_req_zone or limit_conn_zone.
type ngxZone struct {
	name     string
	conn     bool // limit_conn_zone
	key      string
	rate     float64 // requests per second (limit_req_zone)
	rateText string
	size     int64
	sync     bool
	line     int
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
	line         int
}

// ngxConn is a limit_conn directive.
type ngxConn struct {
	zone string
	n    int
	line int
}

// ngxConf is what one context (http, server, location) sets itself.
type ngxConf struct {
	reqs       []ngxReq
	reqStatus  int
	reqDry     *bool
	conns      []ngxConn
	connStatus int
	connDry    *bool
	returnLine int // an unconditional return
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
	e.returns = c.returnLine != 0
	return e
}

func (e *ngxEff) limits() bool { return len(e.reqs)+len(e.conns) > 0 }

// ngxLoc is a location block.
type ngxLoc struct {
	mod, path string // mod: "", "=", "^~", "~", "~*"
	line      int
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
	line     int
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
func (s *ngxServer) redirect() bool { return s.conf.returnLine != 0 }

func (s *ngxServer) String() string {
	if s.implicit {
		return "the configuration"
	}
	if len(s.names) > 0 {
		return fmt.Sprintf("server %s (line %d)", s.names[0], s.line)
	}
	return fmt.Sprintf("the server at line %d", s.line)
}

// ngxVarDef is a map or geo block defining a variable.
type ngxVarDef struct {
	kind    string // "map" or "geo"
	name    string
	line    int
	source  string // map: the source value; geo: the address variable ("" for $remote_addr)
	def     string
	entries []ngxVarEntry
	refuse  string // why the block cannot be read as a condition
}

type ngxVarEntry struct {
	key, value      string
	regex, caseless bool
	cidr            netip.Prefix
	line            int
}

// ngxReader reads the directives into zones, servers and locations.
type ngxReader struct {
	c        *converter
	zones    map[string]*ngxZone
	zoneList []*ngxZone
	vars     map[string]*ngxVarDef
	sets     map[string]int // variables assigned with set, and where
	http     ngxConf
	servers  []*ngxServer
	stray    []*ngxLoc // locations outside a server, in a part of an http block
	includes []string
	rewrites []string
	realIP   bool
}

func (r *ngxReader) read(top []*ngxDirective) error {
	var http *ngxDirective
	for _, d := range top {
		if d.name != "http" || !d.isBlock {
			continue
		}
		if http != nil {
			return lineErr(d.line, "http is duplicate (also line %d)", http.line)
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
		if ctx != "http" && conf.returnLine == 0 {
			conf.returnLine = d.line
		}
		return true, nil
	case "rewrite":
		if n := len(d.args); n >= 2 && d.args[n-1] != "break" {
			r.rewrites = append(r.rewrites, strconv.Itoa(d.line))
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
	r.includes = append(r.includes, fmt.Sprintf("%s (line %d)", strings.Join(d.args, " "), d.line))
}

// other is a directive the conversion does not read: a block of another
// kind (if, stream, upstream, ...) is searched for limits to note.
func (r *ngxReader) other(d *ngxDirective) {
	if d.name == "set_real_ip_from" || d.name == "real_ip_header" {
		r.realIP = true
	}
	if d.isBlock {
		if x := findLimit(d.block); x != nil {
			r.c.note("line %d: %s inside %s is not converted (nginx applies limit_req and limit_conn of http, server and location only; stream limits are TCP connections)", x.line, x.name, d.name)
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
	seen := map[string]int{}
	for _, l := range locs {
		if l.regex() {
			continue
		}
		k := "prefix " + l.path
		if l.exact() {
			k = "exact " + l.path
		}
		if line, dup := seen[k]; dup {
			return lineErr(l.line, "duplicate location %q (also line %d)", l.path, line)
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
		return lineErr(d.line, "zone %q is already defined (line %d)", z.name, prev.line)
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
			return lineErr(d.line, "limit_req zone=%s is duplicate (also line %d)", q.zone, x.line)
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
			return lineErr(d.line, "limit_conn %s is duplicate (also line %d)", x.zone, x.line)
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
			v.refuse = fmt.Sprintf("its entries are in an included file (line %d)", x.line)
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
			v.refuse = fmt.Sprintf("its %s (line %d) is not converted", x.name, x.line)
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
		return lineErr(d.line, "variable $%s is already defined (line %d)", v.name, prev.line)
	}
	r.vars[v.name] = v
	return nil
}

// ---- Keys ----

// ngxKey is what a zone's key becomes: the rule's limit_keys and the
// conditions (from map and geo) under which nginx's key is not empty.
type ngxKey struct {
	sources []string
	match   map[string]any
	never   string // why nginx's key is always empty: the zone limits nothing
}

// key converts a zone's key. nginx does not account a request whose key
// is empty; a Sluice rule does not apply to a request that lacks a value
// of its limit_keys.
func (b *ngxBuilder) key(z *ngxZone) (ngxKey, error) {
	vars, literal, err := ngxKeyVariables(z.key)
	if err != nil {
		return ngxKey{}, lineErr(z.line, "%s %s: key %q: %v", z.directive(), z.name, z.key, err)
	}
	k := ngxKey{match: map[string]any{}}
	if len(vars) == 0 {
		if literal == "" {
			k.never = "its key is empty"
			return k, nil
		}
		return k, lineErr(z.line, "%s %s: key %q is a constant: nginx keeps one state for every request; Sluice keys on a request attribute (write the rule by hand with limit_keys [\"host\"] or [\"route\"])", z.directive(), z.name, z.key)
	}
	for _, v := range vars {
		src, cond, never, err := b.keyVariable(z, v)
		if err != nil {
			return k, err
		}
		if never != "" {
			k.never = never
			return k, nil
		}
		if !slices.Contains(k.sources, src) {
			k.sources = append(k.sources, src)
		}
		if cond != nil {
			if _, dup := k.match[cond.source]; dup {
				return k, lineErr(z.line, "%s %s: key %q sets two conditions on %s; not converted", z.directive(), z.name, z.key, cond.source)
			}
			k.match[cond.source] = cond.cond
		}
	}
	if len(k.sources) > 1 {
		b.c.note("zone %s keys on %s: Sluice limits a request only when it has every one of them, where nginx counts a request lacking some under the others", z.name, strings.Join(k.sources, ", "))
	}
	return k, nil
}

// ngxKeyVariables splits a key into its variables ($name, ${name}) and
// the rest.
func ngxKeyVariables(key string) (vars []string, literal string, err error) {
	var lit strings.Builder
	for i := 0; i < len(key); {
		if key[i] != '$' {
			lit.WriteByte(key[i])
			i++
			continue
		}
		var name string
		if strings.HasPrefix(key[i+1:], "{") {
			end := strings.IndexByte(key[i+2:], '}')
			if end < 0 {
				return nil, "", fmt.Errorf("unterminated ${")
			}
			name, i = key[i+2:i+2+end], i+3+end
		} else {
			j := i + 1
			for j < len(key) && (key[j] == '_' || key[j] >= '0' && key[j] <= '9' || key[j]|0x20 >= 'a' && key[j]|0x20 <= 'z') {
				j++
			}
			name, i = key[i+1:j], j
		}
		if name == "" {
			return nil, "", fmt.Errorf("$ without a variable name")
		}
		vars = append(vars, strings.ToLower(name))
	}
	return vars, lit.String(), nil
}

type ngxCond struct {
	source string
	cond   any
}

// ngxDirectSource is the Sluice source of one of nginx's request
// variables, "" for none.
func (b *ngxBuilder) ngxDirectSource(name string) string {
	switch name {
	case "binary_remote_addr", "remote_addr", "realip_remote_addr":
		note := "nginx's $remote_addr is the address of the peer"
		if b.r.realIP {
			note = "nginx's $remote_addr is the address the realip module takes from the client's header (set_real_ip_from, real_ip_header)"
		}
		b.c.noteOnce(note + "; Sluice's ip:address is the peer's address unless xff_trusted_hops says how many proxies append to X-Forwarded-For: set it so both read the same client")
		return "ip:address"
	case "host", "http_host", "server_name":
		if name == "server_name" {
			b.c.noteOnce("$server_name is a server's first name, one state for all its names in nginx; Sluice's host is the name the request carries, one bucket per name")
		}
		return "host"
	case "uri", "document_uri", "request_uri":
		if name == "request_uri" {
			b.c.noteOnce("$request_uri includes the query string, so nginx gives each query its own state; Sluice's path has none: requests differing only in their query share a bucket")
		}
		return "path"
	case "request_method":
		return "method"
	}
	for prefix, kind := range map[string]string{"http_": "header:", "arg_": "query:", "cookie_": "cookie:", "jwt_claim_": "jwt:"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok && rest != "" {
			if kind == "header:" {
				return kind + strings.ReplaceAll(rest, "_", "-")
			}
			if kind == "cookie:" {
				b.c.noteOnce("nginx compares cookie names ignoring case (and its variable names are lower-case); Sluice's cookie: sources compare them exactly: check that the cookie's name is written as browsers send it")
			}
			if kind == "jwt:" {
				b.c.noteOnce("$jwt_claim_ variables are claims NGINX Plus verified; Sluice's jwt: sources are not verified: put Envoy's jwt_authn before Sluice, or key on the claims it writes to the metadata (docs/configuration.md)")
			}
			return kind + rest
		}
	}
	return ""
}

// keyVariable converts one variable of a key: a request variable, or a
// map (maybe of a geo) whose values are empty or one request variable.
func (b *ngxBuilder) keyVariable(z *ngxZone, name string) (src string, cond *ngxCond, never string, err error) {
	if src := b.ngxDirectSource(name); src != "" {
		return src, nil, "", nil
	}
	where := fmt.Sprintf("%s %s: key variable $%s", z.directive(), z.name, name)
	def := b.r.vars[name]
	switch {
	case def == nil && b.r.sets[name] != 0:
		return "", nil, "", lineErr(z.line, "%s is assigned with set (line %d); not converted: key the zone on a request variable", where, b.r.sets[name])
	case def == nil:
		return "", nil, "", lineErr(z.line, "%s has no Sluice source (Sluice keys on $remote_addr, $http_<header>, $arg_<name>, $cookie_<name>, $host, $uri, $request_method; a map or geo of its own must be in the input)", where)
	case def.kind == "geo":
		return "", nil, "", lineErr(z.line, "%s is a geo (line %d) of fixed values: every client with one value shares one nginx state; not converted", where, def.line)
	}
	return b.mapKey(z, where, def)
}

// mapKey converts a key that is a map's variable. Each of the map's
// values must be "" (nginx then does not limit the request) or one request
// variable, the same everywhere; the map's source becomes a condition on
// when it is not empty.
func (b *ngxBuilder) mapKey(z *ngxZone, where string, m *ngxVarDef) (string, *ngxCond, string, error) {
	if m.refuse != "" {
		return "", nil, "", lineErr(m.line, "map $%s (the key of zone %s): %s", m.name, z.name, m.refuse)
	}
	target := ""
	limited := func(value string) (bool, error) {
		value = strings.TrimSpace(value)
		if value == "" {
			return false, nil
		}
		vars, literal, err := ngxKeyVariables(value)
		if err != nil || len(vars) != 1 || literal != "" {
			return false, fmt.Errorf("value %q is neither empty nor one variable: requests with it would share one nginx state", value)
		}
		if target != "" && vars[0] != target {
			return false, fmt.Errorf("values $%s and $%s differ", target, vars[0])
		}
		target = vars[0]
		return true, nil
	}
	defLimited, err := limited(m.def)
	if err != nil {
		return "", nil, "", lineErr(m.line, "map $%s (the key of zone %s): default %v; not converted", m.name, z.name, err)
	}
	outcomes := make([]bool, len(m.entries))
	for i, e := range m.entries {
		if outcomes[i], err = limited(e.value); err != nil {
			return "", nil, "", lineErr(e.line, "map $%s (the key of zone %s): %v; not converted", m.name, z.name, err)
		}
	}
	if target == "" {
		return "", nil, fmt.Sprintf("map $%s (line %d) is empty for every request", m.name, m.line), nil
	}
	src := b.ngxDirectSource(target)
	if src == "" {
		return "", nil, "", lineErr(m.line, "map $%s (the key of zone %s): $%s is not a request variable Sluice reads; not converted", m.name, z.name, target)
	}
	if defLimited && !slices.Contains(outcomes, false) {
		return src, nil, "", nil // the map is the variable itself
	}
	cond, err := b.mapCondition(z, m, outcomes, defLimited)
	if err != nil {
		return "", nil, "", err
	}
	b.c.note("zone %s keys on map $%s (line %d): the requests for which it is empty are not limited by nginx, and are left out by the rules' match (%s)", z.name, m.name, m.line, cond.source)
	return src, cond, "", nil
}

// mapCondition is the condition on the map's source under which the map
// gives its variable (limited), as nginx looks a value up: exact keys
// (case-insensitive) first, then regular expressions in order, then the
// default.
func (b *ngxBuilder) mapCondition(z *ngxZone, m *ngxVarDef, outcomes []bool, defLimited bool) (*ngxCond, error) {
	vars, literal, err := ngxKeyVariables(m.source)
	if err != nil || len(vars) != 1 || literal != "" {
		return nil, lineErr(m.line, "map $%s (the key of zone %s): its source %q is not one variable; not converted", m.name, z.name, m.source)
	}
	refuse := func(line int, why string, args ...any) error {
		return lineErr(line, "map $%s (the key of zone %s): %s; not converted", m.name, z.name, fmt.Sprintf(why, args...))
	}
	if g := b.r.vars[vars[0]]; g != nil {
		if g.kind != "geo" {
			return nil, refuse(m.line, "its source $%s is a map of its own", g.name)
		}
		return b.geoCondition(m, g, outcomes, defLimited, refuse)
	}
	src := b.ngxDirectSource(vars[0])
	switch src {
	case "":
		return nil, refuse(m.line, "its source $%s is not a request variable Sluice reads", vars[0])
	case "host", "path":
		return nil, refuse(m.line, "a condition on %s would take the place of the server's or location's", src)
	}
	var exacts, alts []string
	var res []*regexp.Regexp
	var plain []ngxVarEntry // exact keys with the default's outcome
	defaultRegex := false
	for i, e := range m.entries {
		switch {
		case e.key == "" && !e.regex:
			return nil, refuse(e.line, "an entry for the empty value")
		case !e.regex && outcomes[i] != defLimited:
			exacts = append(exacts, e.key)
		case !e.regex:
			plain = append(plain, e)
		case outcomes[i] == defLimited:
			defaultRegex = true
		case defaultRegex:
			return nil, refuse(e.line, "a regular expression after one with the other outcome")
		default:
			re := e.key
			if e.caseless {
				re = "(?i:" + re + ")"
			}
			compiled, err := regexp.Compile(re)
			if err != nil {
				return nil, refuse(e.line, "~%s is not RE2 syntax (%v)", e.key, err)
			}
			alts, res = append(alts, "(?:"+re+")"), append(res, compiled)
		}
	}
	for _, e := range plain { // an exact key wins over the regular expressions
		if slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(e.key) }) {
			return nil, refuse(e.line, "%q is kept out of a regular expression of the other outcome", e.key)
		}
	}
	var cond any
	if src == "ip:address" && len(alts) == 0 {
		cond = map[string]any{"in": exacts}
	} else {
		if len(exacts) > 0 {
			q := make([]string, len(exacts))
			for i, e := range exacts {
				q[i] = regexp.QuoteMeta(e)
			}
			alts = append([]string{"(?i:^(?:" + strings.Join(q, "|") + ")$)"}, alts...)
		}
		cond = map[string]any{"regex": strings.Join(alts, "|")}
	}
	if defLimited {
		cond = map[string]any{"not": cond}
	}
	return &ngxCond{source: src, cond: cond}, nil
}

// geoCondition is the condition on a geo's address under which a map of
// the geo's values gives its variable: the geo's blocks, looked up as
// nginx does (the longest matching block, else the default).
func (b *ngxBuilder) geoCondition(m, g *ngxVarDef, outcomes []bool, defLimited bool, refuse func(int, string, ...any) error) (*ngxCond, error) {
	lookup := func(v string) bool {
		for i, e := range m.entries {
			if !e.regex && strings.EqualFold(e.key, v) {
				return outcomes[i]
			}
		}
		for i, e := range m.entries {
			if e.regex {
				src := e.key
				if e.caseless {
					src = "(?i)" + src
				}
				if re, err := regexp.Compile(src); err == nil && re.MatchString(v) {
					return outcomes[i]
				}
			}
		}
		return defLimited
	}
	if g.refuse != "" {
		return nil, refuse(g.line, "geo $%s: %s", g.name, g.refuse)
	}
	src := "ip:address"
	if g.source != "" {
		vars, literal, err := ngxKeyVariables(g.source)
		if err != nil || len(vars) != 1 || literal != "" {
			return nil, refuse(g.line, "geo $%s reads %q", g.name, g.source)
		}
		if src = b.ngxDirectSource(vars[0]); src == "" || src == "host" || src == "path" || src == "method" {
			return nil, refuse(g.line, "geo $%s reads $%s", g.name, vars[0])
		}
	}
	var yes, no []ngxVarEntry
	for _, e := range g.entries {
		if lookup(e.value) {
			yes = append(yes, e)
		} else {
			no = append(no, e)
		}
	}
	for _, y := range yes {
		for _, n := range no {
			if y.cidr.Overlaps(n.cidr) {
				return nil, refuse(n.line, "geo $%s: %s and %s (line %d) nest with different outcomes", g.name, n.key, y.key, y.line)
			}
		}
	}
	blocks := func(es []ngxVarEntry) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.cidr.String()
		}
		return out
	}
	switch {
	case lookup(g.def) && len(no) == 0:
		return nil, nil
	case lookup(g.def):
		return &ngxCond{source: src, cond: map[string]any{"not": map[string]any{"cidr": blocks(no)}}}, nil
	case len(yes) == 0:
		return nil, refuse(g.line, "it is empty for every address")
	}
	return &ngxCond{source: src, cond: map[string]any{"cidr": blocks(yes)}}, nil
}

// ---- Where nginx's location selection ends ----

// ngxPath is a path condition: exact, or a literal prefix and maybe a
// regular expression (a regex location nginx tests when a request's
// longest prefix location is the prefix).
type ngxPath struct {
	exact   string
	isExact bool
	prefix  string // "" for none ("/" is none: every path starts with it)
	regex   string
	re      *regexp.Regexp
	loc     *ngxLoc // the regex location, for errors
	// not is a regular expression the path must not match: the regex
	// locations of an identical limit later in the policy, whose requests
	// go on to it.
	nots  []string
	not   string
	notRe *regexp.Regexp
}

// ngxAlternation is a regular expression matching what any of res
// matches, each in a group of its own so that its flags stay in it.
func ngxAlternation(res []string) string {
	if len(res) == 1 {
		return res[0]
	}
	return "(?:" + strings.Join(res, ")|(?:") + ")"
}

// maybe reports whether the condition may hold for path.
func (p *ngxPath) maybe(path string) bool {
	switch {
	case p.isExact:
		return path == p.exact
	case !strings.HasPrefix(path, p.prefix):
		return false
	case p.notRe != nil && p.notRe.MatchString(path):
		return false
	case p.regex != "" && p.re != nil:
		return p.re.MatchString(path)
	}
	return true
}

// holds reports whether the condition surely holds for path.
func (p *ngxPath) holds(path string) bool {
	return p.maybe(path) && (p.isExact || p.regex == "" || p.re != nil)
}

func (p *ngxPath) disjoint(o *ngxPath) bool {
	switch {
	case p.isExact && o.isExact:
		return p.exact != o.exact
	case p.isExact:
		return !o.maybe(p.exact)
	case o.isExact:
		return !p.maybe(o.exact)
	}
	return !strings.HasPrefix(p.prefix, o.prefix) && !strings.HasPrefix(o.prefix, p.prefix)
}

// covers reports whether every path o holds for, p holds for.
func (p *ngxPath) covers(o *ngxPath) bool {
	switch {
	case p.isExact:
		return o.isExact && o.exact == p.exact
	case o.isExact:
		return p.holds(o.exact)
	case !strings.HasPrefix(o.prefix, p.prefix):
		return false
	}
	return (p.regex == "" || p.regex == o.regex) && (p.not == "" || p.not == o.not)
}

func (p *ngxPath) addTo(m map[string]any) {
	var cond any
	switch {
	case p.isExact:
		m["path"] = p.exact
		return
	case p.regex != "":
		cond = map[string]any{"regex": p.regex}
	case p.not != "":
		cond = map[string]any{"not": map[string]any{"regex": p.not}}
	case p.prefix != "":
		m["path"] = map[string]any{"prefix": p.prefix}
	}
	if cond != nil {
		m["path"] = cond
		if p.prefix != "" {
			m["path_prefix"] = p.prefix
		}
	}
}

var ngxSlugUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.]+`)

func ngxSlug(s string) string { return strings.Trim(ngxSlugUnsafe.ReplaceAllString(s, "-"), "-._") }

func (p *ngxPath) label() string {
	var parts []string
	switch {
	case p.isExact:
		parts = append(parts, p.exact)
	case p.prefix != "":
		parts = append(parts, p.prefix)
	}
	if p.regex != "" {
		parts = append(parts, p.loc.path)
	}
	var out []string
	for _, s := range parts {
		if s = ngxSlug(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 && (p.isExact || p.prefix != "") {
		return "root"
	}
	return strings.Join(out, "-")
}

// ngxSpot is where nginx's location selection ends for the requests a
// path condition holds for, given the conditions before it.
type ngxSpot struct {
	path ngxPath
	loc  *ngxLoc // nil: no location matches, the server's own configuration
}

// ngxMaxRules bounds the rules the conversion considers.
const ngxMaxRules = 5000

// serverSpots lists a server's spots in an order whose first match is
// nginx's selection (ngx_http_core_find_location): at each level the exact
// locations, then the longest prefix location, whose nested locations are
// looked at first; then the regex locations nested in it, then those of
// the levels above it (each level's only when the prefix found at that
// level is not ^~); then the prefix location itself. A top-level prefix
// location with no regex or exact location inside, which extends no prefix
// location kept before the regexes, is put after the server's regex
// locations, which then need no prefix condition of their own.
func (b *ngxBuilder) serverSpots(s *ngxServer) ([]ngxSpot, error) {
	var out []ngxSpot
	late := lateLocations(s.locs)
	out = append(out, exactSpots(s.locs)...)
	for _, y := range prefixesLongestFirst(s.locs) {
		if late[y] {
			continue
		}
		var tail [][]*ngxLoc
		if y.mod != "^~" {
			tail = [][]*ngxLoc{s.locs}
		}
		out = b.block(out, y, tail)
	}
	out = b.regexSpots(out, s.locs, "")
	for _, y := range prefixesLongestFirst(s.locs) {
		if late[y] {
			out = b.block(out, y, nil)
		}
	}
	out = append(out, ngxSpot{})
	if len(out) > ngxMaxRules {
		return nil, lineErr(s.line, "%s: its locations make more than %d rules; convert fewer servers or locations at a time", s, ngxMaxRules)
	}
	return out, nil
}

// block adds the spots of the requests whose longest prefix location at
// its level is y; tail holds the levels whose regex locations nginx tests
// after y's own, nearest first.
func (b *ngxBuilder) block(out []ngxSpot, y *ngxLoc, tail [][]*ngxLoc) []ngxSpot {
	if len(out) > ngxMaxRules {
		return out
	}
	out = append(out, exactSpots(y.kids)...)
	for _, z := range prefixesLongestFirst(y.kids) {
		zt := tail
		if z.mod != "^~" {
			zt = append([][]*ngxLoc{y.kids}, tail...)
		}
		out = b.block(out, z, zt)
	}
	prefix := ngxPrefix(y.path)
	out = b.regexSpots(out, y.kids, prefix)
	for _, level := range tail {
		out = b.regexSpots(out, level, prefix)
	}
	return append(out, ngxSpot{path: ngxPath{prefix: prefix}, loc: y})
}

func ngxPrefix(p string) string {
	if p == "/" {
		return ""
	}
	return p
}

func exactSpots(locs []*ngxLoc) []ngxSpot {
	var out []ngxSpot
	for _, l := range locs {
		if l.exact() {
			out = append(out, ngxSpot{path: ngxPath{exact: l.path, isExact: true}, loc: l})
		}
	}
	return out
}

func (b *ngxBuilder) regexSpots(out []ngxSpot, level []*ngxLoc, prefix string) []ngxSpot {
	for _, l := range level {
		if !l.regex() || len(out) > ngxMaxRules {
			continue
		}
		src := l.path
		if l.mod == "~*" {
			src = "(?i)" + src
		}
		b.nestedInRegex(l)
		out = append(out, ngxSpot{path: ngxPath{prefix: prefix, regex: src, re: l.re, loc: l}, loc: l})
	}
	return out
}

// nestedInRegex notes the locations inside a regex location that limit
// differently: a rule's path has room for one regular expression.
func (b *ngxBuilder) nestedInRegex(l *ngxLoc) {
	var differs func([]*ngxLoc) bool
	differs = func(kids []*ngxLoc) bool {
		for _, k := range kids {
			if !ngxSameLimits(&k.eff, &l.eff) || differs(k.kids) {
				return true
			}
		}
		return false
	}
	if differs(l.kids) {
		b.c.noteOnce(fmt.Sprintf("line %d: the locations nested in %s limit differently from it, and are converted as it (a rule's path holds one regular expression)", l.line, l))
	}
}

func ngxSameLimits(a, b *ngxEff) bool {
	return slices.Equal(a.reqs, b.reqs) && slices.Equal(a.conns, b.conns) && a.returns == b.returns &&
		a.reqStatus == b.reqStatus && a.reqDry == b.reqDry && a.connStatus == b.connStatus && a.connDry == b.connDry
}

func prefixesLongestFirst(locs []*ngxLoc) []*ngxLoc {
	var out []*ngxLoc
	for _, l := range locs {
		if l.prefix() {
			out = append(out, l)
		}
	}
	slices.SortStableFunc(out, func(a, b *ngxLoc) int { return len(b.path) - len(a.path) })
	return out
}

// lateLocations are the top-level prefix locations whose spots can follow
// the server's regex locations (see serverSpots).
func lateLocations(top []*ngxLoc) map[*ngxLoc]bool {
	late := map[*ngxLoc]bool{}
	ps := prefixesLongestFirst(top)
	slices.Reverse(ps)
	var early []string
	for _, y := range ps {
		if y.mod == "" && !hasRegexOrExact(y.kids) && !slices.ContainsFunc(early, func(x string) bool { return strings.HasPrefix(y.path, x) }) {
			late[y] = true
		} else {
			early = append(early, y.path)
		}
	}
	return late
}

func hasRegexOrExact(locs []*ngxLoc) bool {
	for _, l := range locs {
		if !l.prefix() || hasRegexOrExact(l.kids) {
			return true
		}
	}
	return false
}

// ---- Servers and their names ----

// ngxHost is a host condition: any of its names (none: any host).
type ngxHost struct {
	exact    []string
	suffixes []string // *.example.com as ".example.com"
	prefixes []string // www.example.* as "www.example."
	regexes  []string // ~regex, matched case-insensitively
	res      []*regexp.Regexp
}

func (h *ngxHost) any() bool {
	return len(h.exact)+len(h.suffixes)+len(h.prefixes)+len(h.regexes) == 0
}

func (h *ngxHost) matches(host string) bool {
	return slices.Contains(h.exact, host) ||
		slices.ContainsFunc(h.suffixes, func(s string) bool { return strings.HasSuffix(host, s) }) ||
		slices.ContainsFunc(h.prefixes, func(p string) bool { return strings.HasPrefix(host, p) }) ||
		slices.ContainsFunc(h.res, func(re *regexp.Regexp) bool { return re.MatchString(host) })
}

func (h *ngxHost) disjoint(o *ngxHost) bool {
	if h == o || h.any() || o.any() {
		return false
	}
	for _, e := range h.exact {
		if o.matches(e) {
			return false
		}
	}
	for _, e := range o.exact {
		if h.matches(e) {
			return false
		}
	}
	hPatterns, oPatterns := len(h.suffixes)+len(h.prefixes)+len(h.regexes), len(o.suffixes)+len(o.prefixes)+len(o.regexes)
	switch {
	case hPatterns == 0 || oPatterns == 0:
		return true
	case len(h.regexes) > 0 || len(o.regexes) > 0:
		return false
	case len(h.suffixes) > 0 && len(o.prefixes) > 0, len(h.prefixes) > 0 && len(o.suffixes) > 0:
		return false
	}
	nested := func(as, bs []string, has func(string, string) bool) bool {
		for _, a := range as {
			for _, b := range bs {
				if has(a, b) || has(b, a) {
					return true
				}
			}
		}
		return false
	}
	return !nested(h.suffixes, o.suffixes, strings.HasSuffix) && !nested(h.prefixes, o.prefixes, strings.HasPrefix)
}

func (h *ngxHost) covers(o *ngxHost) bool {
	switch {
	case h == o || h.any():
		return true
	case o.any():
		return false
	}
	for _, e := range o.exact {
		if !h.matches(e) {
			return false
		}
	}
	for _, s := range o.suffixes {
		if !slices.ContainsFunc(h.suffixes, func(x string) bool { return strings.HasSuffix(s, x) }) {
			return false
		}
	}
	for _, p := range o.prefixes {
		if !slices.ContainsFunc(h.prefixes, func(x string) bool { return strings.HasPrefix(p, x) }) {
			return false
		}
	}
	for _, re := range o.regexes {
		if !slices.Contains(h.regexes, re) {
			return false
		}
	}
	return true
}

func (h *ngxHost) union(o *ngxHost) ngxHost {
	if h.any() || o.any() {
		return ngxHost{}
	}
	return ngxHost{
		exact: append(slices.Clip(h.exact), o.exact...), suffixes: append(slices.Clip(h.suffixes), o.suffixes...),
		prefixes: append(slices.Clip(h.prefixes), o.prefixes...), regexes: append(slices.Clip(h.regexes), o.regexes...),
		res: append(slices.Clip(h.res), o.res...),
	}
}

// condition is the host condition in policy syntax; nil for any host.
func (h *ngxHost) condition() any {
	patterns := len(h.suffixes) + len(h.prefixes) + len(h.regexes)
	switch {
	case h.any():
		return nil
	case patterns == 0 && len(h.exact) == 1:
		return h.exact[0]
	case patterns == 0:
		return map[string]any{"in": h.exact}
	case len(h.exact) == 0 && patterns == 1 && len(h.suffixes) == 1:
		return map[string]any{"suffix": h.suffixes[0]}
	case len(h.exact) == 0 && patterns == 1 && len(h.prefixes) == 1:
		return map[string]any{"prefix": h.prefixes[0]}
	}
	var alts []string
	if len(h.exact) > 0 {
		q := make([]string, len(h.exact))
		for i, e := range h.exact {
			q[i] = regexp.QuoteMeta(e)
		}
		alts = append(alts, "^(?:"+strings.Join(q, "|")+")$")
	}
	for _, s := range h.suffixes {
		alts = append(alts, regexp.QuoteMeta(s)+"$")
	}
	for _, p := range h.prefixes {
		alts = append(alts, "^"+regexp.QuoteMeta(p))
	}
	for _, re := range h.regexes {
		alts = append(alts, "(?i:"+re+")")
	}
	return map[string]any{"regex": strings.Join(alts, "|")}
}

// ngxGroup is a server with the host names that reach it at its place in
// the rules.
type ngxGroup struct {
	server *ngxServer
	host   ngxHost
}

func (g *ngxGroup) label() string {
	h := &g.host
	var l string
	switch {
	case len(h.exact) > 0:
		l = h.exact[0]
	case len(h.suffixes) > 0:
		l = "wildcard" + h.suffixes[0]
	case len(h.prefixes) > 0:
		l = h.prefixes[0] + "wildcard"
	case len(h.regexes) > 0:
		l = h.regexes[0]
	case len(g.server.names) > 0:
		l = g.server.names[0]
	}
	if l = ngxSlug(l); l == "" {
		return "default"
	}
	return l
}

// ngxName is a server name as nginx reads it.
type ngxName struct {
	kind byte // 'e' exact, 's' *.suffix, 'p' prefix.*, 'r' regex
	key  string
	s    *ngxServer
}

// ngxNames classifies a server's names; ".example.com" is both
// example.com and *.example.com.
func ngxNames(s *ngxServer) []ngxName {
	var out []ngxName
	for _, n := range s.names {
		if strings.HasPrefix(n, "~") {
			out = append(out, ngxName{'r', n[1:], s})
			continue
		}
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		switch {
		case n == "" || n == "_" || strings.HasPrefix(n, "$"):
		case strings.HasPrefix(n, "*."):
			out = append(out, ngxName{'s', n[1:], s})
		case strings.HasPrefix(n, "."):
			out = append(out, ngxName{'e', n[1:], s}, ngxName{'s', n, s})
		case strings.HasSuffix(n, ".*"):
			out = append(out, ngxName{'p', n[:len(n)-1], s})
		case strings.Contains(n, "*"):
		default:
			out = append(out, ngxName{'e', n, s})
		}
	}
	return out
}

// hostGroups orders the servers' names as nginx looks a host up: exact
// names, then the longest *.suffix, then the longest prefix.*, then the
// regular expressions in order; the default server last, for any host.
// A name of two servers belongs to the first (a server that only
// redirects yields it: Sluice does not tell listen ports apart).
func (b *ngxBuilder) hostGroups() ([]*ngxGroup, error) {
	servers := b.r.servers
	def := ngxDefaultServer(servers)
	owner := map[string]*ngxServer{}
	for _, redirects := range []bool{false, true} {
		for _, s := range servers {
			if s.redirect() != redirects {
				continue
			}
			for _, n := range ngxNames(s) {
				k := string(n.kind) + n.key
				if o := owner[k]; o != nil && o != s {
					if n.kind != 'r' {
						b.c.note("server name %s is in %s and %s: converted as %s's (nginx picks the first of one address and port; Sluice does not tell ports apart)", n.key, o, s, o)
					}
					continue
				}
				owner[k] = s
			}
		}
	}
	var exact, lead, trail, rx []*ngxGroup
	for _, s := range servers {
		var names []string
		for _, n := range ngxNames(s) {
			if owner[string(n.kind)+n.key] != s {
				continue
			}
			switch n.kind {
			case 'e':
				if !slices.Contains(names, n.key) {
					names = append(names, n.key)
				}
			case 's':
				lead = append(lead, &ngxGroup{server: s, host: ngxHost{suffixes: []string{n.key}}})
			case 'p':
				trail = append(trail, &ngxGroup{server: s, host: ngxHost{prefixes: []string{n.key}}})
			case 'r':
				re, err := regexp.Compile("(?i:" + n.key + ")")
				if err != nil {
					return nil, lineErr(s.line, "server_name ~%s is not RE2 syntax (%v): rewrite it (Sluice's regular expressions have no look-around or back-references)", n.key, err)
				}
				rx = append(rx, &ngxGroup{server: s, host: ngxHost{regexes: []string{n.key}, res: []*regexp.Regexp{re}}})
			}
		}
		if len(names) > 0 {
			exact = append(exact, &ngxGroup{server: s, host: ngxHost{exact: names}})
		}
	}
	longest := func(key func(*ngxGroup) string) func(a, b *ngxGroup) int {
		return func(a, b *ngxGroup) int { return len(key(b)) - len(key(a)) }
	}
	slices.SortStableFunc(lead, longest(func(g *ngxGroup) string { return g.host.suffixes[0] }))
	slices.SortStableFunc(trail, longest(func(g *ngxGroup) string { return g.host.prefixes[0] }))
	gs := slices.Concat(exact, lead, trail, rx, []*ngxGroup{{server: def}})
	return compactGroups(gs), nil
}

// ngxDefaultServer is the server of a listen ... default_server, else the
// first; a server that only redirects only when all do.
func ngxDefaultServer(servers []*ngxServer) *ngxServer {
	for _, pick := range []func(*ngxServer) bool{
		func(s *ngxServer) bool { return s.def && !s.redirect() },
		func(s *ngxServer) bool { return !s.redirect() },
		func(s *ngxServer) bool { return s.def },
	} {
		if i := slices.IndexFunc(servers, pick); i >= 0 {
			return servers[i]
		}
	}
	return servers[0]
}

// compactGroups drops a group whose requests reach a later group of the
// same server anyway, and joins a group to an earlier one of its server
// when no group between them could take its requests.
func compactGroups(gs []*ngxGroup) []*ngxGroup {
	for i := len(gs) - 2; i >= 0; i-- {
		g := gs[i]
		for _, later := range gs[i+1:] {
			if g.host.disjoint(&later.host) {
				continue
			}
			if later.server == g.server && later.host.covers(&g.host) {
				gs = slices.Delete(gs, i, i+1)
			}
			break
		}
	}
	for j := 1; j < len(gs); j++ {
		for i := j - 1; i >= 0; i-- {
			if gs[i].server == gs[j].server {
				gs[i].host = gs[i].host.union(&gs[j].host)
				gs = slices.Delete(gs, j, j+1)
				j--
				break
			}
			if !gs[i].host.disjoint(&gs[j].host) {
				break
			}
		}
	}
	return gs
}

// ---- Rules ----

// ngxRule is what one zone does at one spot of one group: limit, or not
// (an unlimited rule, so that a later rule of the zone does not take the
// request).
type ngxRule struct {
	zone   *ngxZone
	group  *ngxGroup
	spot   *ngxSpot
	limit  bool
	req    *ngxReq
	conn   *ngxConn
	status int
	dry    bool
}

func (r *ngxRule) same(o *ngxRule) bool {
	if !r.limit || !o.limit {
		return r.limit == o.limit
	}
	return r.zone == o.zone && r.status == o.status && r.dry == o.dry &&
		(r.req == nil) == (o.req == nil) && (r.req == nil || r.req.burst == o.req.burst && r.req.delay == o.req.delay) &&
		(r.conn == nil) == (o.conn == nil) && (r.conn == nil || r.conn.n == o.conn.n)
}

func (r *ngxRule) disjoint(o *ngxRule) bool {
	return r.spot.path.disjoint(&o.spot.path) || r.group.host.disjoint(&o.group.host)
}

func (r *ngxRule) covers(o *ngxRule) bool {
	return r.group.host.covers(&o.group.host) && r.spot.path.covers(&o.spot.path)
}

// ngxBuilder makes the policy.
type ngxBuilder struct {
	r      *ngxReader
	c      *converter
	groups []*ngxGroup
	spots  map[*ngxServer][]ngxSpot
	nrules int
	// bigZones are the zones holding more states than max_keys' default
	bigZones []string
}

// zoneRules are a zone's rules for every group and spot, in order.
func (b *ngxBuilder) zoneRules(z *ngxZone) ([]*ngxRule, error) {
	var out []*ngxRule
	for _, g := range b.groups {
		spots := b.spots[g.server]
		for i := range spots {
			sp := &spots[i]
			eff := &g.server.eff
			if sp.loc != nil {
				eff = &sp.loc.eff
			}
			r := &ngxRule{zone: z, group: g, spot: sp}
			if !g.server.redirect() && !eff.returns {
				r.fill(eff)
			}
			out = append(out, r)
		}
		if b.nrules += len(spots); b.nrules > ngxMaxRules {
			return nil, fmt.Errorf("%s: its servers and locations make more than %d rules; convert fewer servers at a time", nginxDoc, ngxMaxRules)
		}
	}
	return out, nil
}

func (r *ngxRule) fill(eff *ngxEff) {
	if r.zone.conn {
		for i := range eff.conns {
			if c := &eff.conns[i]; c.zone == r.zone.name {
				r.limit, r.conn, r.status, r.dry = true, c, eff.connStatus, eff.connDry
			}
		}
		return
	}
	for i := range eff.reqs {
		if q := &eff.reqs[i]; q.zone == r.zone.name {
			r.limit, r.req, r.status, r.dry = true, q, eff.reqStatus, eff.reqDry
		}
	}
}

// simplify drops the rules that change nothing: those an earlier rule
// always takes first; a limit rule whose requests all go on to an
// identical rule that holds for them; an unlimited rule that no later limit
// rule could take the requests of.
func simplify(rules []*ngxRule) []*ngxRule {
	var reached []*ngxRule
	for _, r := range rules {
		if !slices.ContainsFunc(reached, func(e *ngxRule) bool { return e.covers(r) }) {
			reached = append(reached, r)
		}
	}
	var later []*ngxRule // kept, last first
	for i := len(reached) - 1; i >= 0; i-- {
		r := reached[i]
		if !r.needed(later) {
			continue
		}
		if absorbed, ok := r.absorbedBy(later); ok {
			later = absorbed
			continue
		}
		later = append(later, r)
	}
	slices.Reverse(later)
	return later
}

// absorbedBy lets a later identical rule that holds for a regex
// location's requests take them, so that one bucket counts them as
// nginx's one zone does: the rules between, which would take some of them
// first, leave them out with a "not regex" condition (an exact one, which
// could only hold for them, goes). It returns the later rules so changed,
// or false when a rule between has a regex, a host of its own or a path
// outside the regex's prefix.
func (r *ngxRule) absorbedBy(later []*ngxRule) ([]*ngxRule, bool) {
	a := &r.spot.path
	if !r.limit || a.re == nil || a.not != "" {
		return nil, false
	}
	var between []int
	for i := len(later) - 1; i >= 0; i-- {
		l := later[i]
		switch {
		case r.disjoint(l):
			continue
		case l.same(r) && l.covers(r):
			out := slices.Clone(later)
			for _, j := range between { // from the nearest
				if out[j].spot.path.isExact {
					out = slices.Delete(out, j, j+1)
					continue
				}
				c, spot := *out[j], *out[j].spot
				spot.path.nots = append(slices.Clip(spot.path.nots), a.regex)
				spot.path.not = ngxAlternation(spot.path.nots)
				spot.path.notRe = regexp.MustCompile(spot.path.not)
				c.spot = &spot
				out[j] = &c
			}
			return out, true
		case !r.group.host.covers(&l.group.host):
			return nil, false
		case l.spot.path.isExact:
		case l.spot.path.regex != "" || !strings.HasPrefix(l.spot.path.prefix, a.prefix):
			return nil, false
		}
		between = append(between, i)
	}
	return nil, false
}

func (r *ngxRule) needed(later []*ngxRule) bool {
	if !r.limit && !slices.ContainsFunc(later, func(l *ngxRule) bool { return l.limit && !r.disjoint(l) }) {
		return false
	}
	for i := len(later) - 1; i >= 0; i-- {
		if l := later[i]; !r.disjoint(l) {
			return !(l.same(r) && l.covers(r))
		}
	}
	return true
}

// ngxPolicy is the rules of one or more zones.
type ngxPolicy struct {
	zones []*ngxZone
	rules []*ngxRule
}

// mergeDisjoint puts zones whose rules cannot apply to the same request in
// one policy: each request then meets the rules of one of them only.
func mergeDisjoint(pols []*ngxPolicy) []*ngxPolicy {
	var out []*ngxPolicy
	for _, p := range pols {
		i := slices.IndexFunc(out, func(m *ngxPolicy) bool {
			return !slices.ContainsFunc(m.rules, func(a *ngxRule) bool {
				return slices.ContainsFunc(p.rules, func(b *ngxRule) bool { return !a.disjoint(b) })
			})
		})
		if i < 0 {
			out = append(out, &ngxPolicy{zones: slices.Clone(p.zones), rules: slices.Clone(p.rules)})
			continue
		}
		out[i].zones = append(out[i].zones, p.zones...)
		out[i].rules = append(out[i].rules, p.rules...)
	}
	return out
}

// ---- The policy ----

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
			b.c.note("zone %s (line %d) limits no request: no limit_req or limit_conn that applies uses it", z.name, z.line)
			continue
		}
		k, err := b.key(z)
		if err != nil {
			return Result{}, err
		}
		if k.never != "" {
			b.c.note("zone %s (line %d) limits no request: %s, and nginx does not limit a request whose key is empty", z.name, z.line, k.never)
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
	doc, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return Result{}, err
	}
	if _, err := policy.Parse(doc); err != nil {
		return Result{}, fmt.Errorf("%s: the converted policy is refused: %w", nginxDoc, err)
	}
	return Result{Policy: append(doc, '\n'), Notes: b.c.notes}, nil
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
				return lineErr(q.line, "limit_req zone=%s: %s is a limit_conn_zone (line %d)", q.zone, q.zone, z.line)
			}
		}
		for _, x := range c.conns {
			z := b.r.zones[x.zone]
			switch {
			case z == nil:
				return lineErr(x.line, "limit_conn %s: no limit_conn_zone defines it; add the http block's limit_conn_zone lines to the input", x.zone)
			case !z.conn:
				return lineErr(x.line, "limit_conn %s: %s is a limit_req_zone (line %d)", x.zone, x.zone, z.line)
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
	return out, nil
}

func (b *ngxBuilder) policyName(p *ngxPolicy, n int) string {
	switch {
	case len(p.zones) == 1:
		return unique(b.c.pols, p.zones[0].name)
	case n == 1:
		return unique(b.c.pols, policy.DefaultPolicyName)
	}
	names := make([]string, len(p.zones))
	for i, z := range p.zones {
		names[i] = z.name
	}
	return unique(b.c.pols, strings.Join(names, "-"))
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
		names[i] = unique(b.c.rules, strings.Join(parts, "-"))
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
// (nginx's per-context limit_req_status and limit_conn_status; Sluice has
// one); 0 for Sluice's default, 429.
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
	for _, s := range order {
		if s != best {
			b.c.note("nginx rejects with %d at rules %s; Sluice has one reject_status, %d, the status of most rules", s, strings.Join(statuses[s], ", "), best)
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
			b.c.noteOnce(fmt.Sprintf("line %d: zone %s admits %d request(s) at once at rate=%s; Sluice's burst is at least its rate, so rule %s admits %d at once where nginx paces them", r.req.line, z.name, raised, z.rateText, names[i], cfg.Burst))
		}
		if clamped > 0 {
			b.c.noteOnce(fmt.Sprintf("line %d: zone %s holds requests up to %d ms; Sluice holds at most %d ms (max_delay_ms), so rule %s rejects those nginx would send later", r.req.line, z.name, clamped, policy.MaxDelayMS, names[i]))
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
		b.c.note("include is not followed: %s; the conversion reads one file: put the included files' text in place of their include lines (cat) and convert the result", strings.Join(r.includes, ", "))
	}
	if len(b.bigZones) > 0 {
		b.c.note("zones keep more states in nginx than a Sluice rule keeps clients exactly by default (%d; beyond them it shares buckets, never letting a client go unlimited): %s; raise the rules' max_keys (up to %d) to keep as many", policy.DefaultMaxKeys, strings.Join(b.bigZones, ", "), policy.MaxMaxKeys)
	}
	if len(r.rewrites) > 0 {
		b.c.note("rewrite (lines %s) changes the URI nginx selects a location by, or redirects before the limits run; Sluice matches the request's own path", strings.Join(r.rewrites, ", "))
	}
	paths, conns, hosts := false, false, false
	var returns []string
	for _, p := range pols {
		for _, rule := range p.rules {
			pa := &rule.spot.path
			paths = paths || pa.isExact || pa.prefix != "" || pa.regex != ""
			conns = conns || rule.conn != nil
			hosts = hosts || !rule.group.host.any()
			line := 0
			switch l, s := rule.spot.loc, rule.group.server; {
			case s.redirect() && s.eff.limits():
				line = s.conf.returnLine
			case l != nil && l.eff.returns && l.eff.limits():
				line = l.conf.returnLine
			}
			if line > 0 && !slices.Contains(returns, strconv.Itoa(line)) {
				returns = append(returns, strconv.Itoa(line))
			}
		}
	}
	if len(returns) > 0 {
		b.c.note("the return directives at lines %s answer before nginx's limits run: their requests are not limited here either", strings.Join(returns, ", "))
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
