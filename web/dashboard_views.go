package web

// View structs of the dashboard and the telemetry settings page. Like the
// others (views.go) they hold values already formatted for people; the
// charts come ready to draw from NewChart.

// DashboardPage is the live dashboard (the landing page after login).
type DashboardPage struct {
	Nav     Nav
	Windows []WindowLink // the chart spans to choose from
	Query   string       // the key search box
	Live    DashboardLive
	Reset   ResetPanel // the "Reset a client" form and the recent resets
}

// ResetPanel is the dashboard's "Reset a client" form: an on-call engineer
// makes every Envoy forget one identity's state under one rule, or every
// identity's.
type ResetPanel struct {
	CanReset bool     // the account may reset (an editor or an admin)
	CSRF     string   // the session's CSRF token
	Rules    []string // the rules a reset applies to, within the account's scope
	Rule     string   // the rule chosen last (kept after a submission)
	Key      string   // the key typed last (kept after a refusal)
	All      bool     // "every identity of the rule" ticked last (kept after a refusal)
	Flash    *Flash   // the outcome of the last submission
	Recent   []ResetRow
	InForce  string // how many connected Envoys have the latest resets ("" when unknown)
}

// ResetRow is one recent reset, its key masked as identities are; All:
// every identity of the rule (no key).
type ResetRow struct {
	ID, Rule, Key, Author, Created string
	All                            bool
}

// WindowLink is one choice of chart span ("1m", "5m", "15m").
type WindowLink struct {
	Label  string
	URL    string
	Active bool
}

// DashboardLive is the part of the dashboard that updates itself: the
// fragment served to the page's script (server-sent events, or polling).
type DashboardLive struct {
	Enabled     bool   // telemetry is wired in this admin
	FragmentURL string // GET: this fragment as HTML
	EventsURL   string // GET: text/event-stream of "update" events carrying the fragment
	Window      string // "5m"
	Updated     string // "12:00:01 UTC"
	UpdatedISO  string
	NoReports   bool // no node has reported (yet, or within the node TTL)
	Totals      []Stat
	Rules       []RuleCard
	Search      *SearchResult // nil: no search
	Keys        []KeyRow      // the hottest keys
	KeysTotal   int           // bucket states held
	Nodes       []NodeRow
	Current     int64  // the current policy version
	Footer      string // sizes and counters of the telemetry state
	// BoundsNotice, when not empty, says that the telemetry state refused
	// new nodes, VMs or rules recently (its bounds are full).
	BoundsNotice string
	Fleet        *FleetSection // nil: fleet mode (-rls-listen) is off
}

// Stat is one number with its rate: "allowed 1,234 (12.5/s)".
type Stat struct {
	Kind  string // "allowed", "rejected", "shadow_rejected", "fail_open": the CSS class
	Label string
	Count string // over the window
	Rate  string // per second, over the last 10 s
	Share string // "9.9 %" of every request in the window ("" for allowed)
}

// RuleCard is one rule: its numbers and its chart.
type RuleCard struct {
	Name     string
	Nodes    int
	Stats    []Stat
	Chart    Chart
	Overflow *RuleOverflow // nil: no overflow limit decided a request in the window, and none is shared now
	Actions  string        // requests exempted, denied or decided by an override: "" for none
	// ResponseCosts: a rule charged from the response, its charges ("" for
	// others); CostsUnreported: most were default_cost, shown as a warning.
	ResponseCosts   string
	CostsUnreported bool
	// KeyMissing: requests the rule matched but skipped for want of a
	// limit key's value ("" for none); NeverKeyed: it decided no request
	// in the window, shown as a warning.
	KeyMissing string
	NeverKeyed bool
	// Time says when a rule for a time ("from", "until", "schedule")
	// applies ("" for always); TimeNow whether it does now.
	Time    string
	TimeNow bool
}

// RuleOverflow is what the rule's overflow limits decided: requests whose
// identity found no place in the plugin's bounded table (max_keys).
type RuleOverflow struct {
	Rate       string // per second, over the last 10 s
	Count      string // over the window
	Identities string // "1,234": the estimated identities sharing one overflow limit; "" for none
}

// KeyRow is one bucket.
type KeyRow struct {
	Rule      string
	Node      string // the node of the bucket shown (the emptiest)
	Nodes     int    // nodes that reported the key
	Identity  string // control characters shown escaped
	Tokens    string // "3.5 / 20"
	FillWidth string // the fill bar's width in the 0..100 SVG box
	FillClass string // "low" (under 20 %), "mid" (under 50 %) or "high"
	FillPct   string // "17 %"
	Recent    string // rejects in the last minute
	Total     string // rejects since the admin first saw it
	Seen      string // "2 s ago"
	Masked    bool   // matched only on the visible part of a masked identity
}

// SearchResult is the answer to the key search.
type SearchResult struct {
	Query string
	Keys  []KeyRow
	Total int // matches in all (Keys holds the hottest of them)
}

// NodeRow is the health of one Envoy node.
type NodeRow struct {
	ID         string
	LastReport string // "0.4 s ago"
	Stale      bool
	Version    int64 // the policy version of the configuration it reports; 0: none matches
	Hash       string
	UpToDate   bool
	VMs        int
	Rate       string // requests per second, every rule
	Received   string
	Rejected   string // reports refused as invalid
	Dropped    string // reports the plugin failed to deliver
}

// TelemetryPage shows the telemetry token and how to point the plugin at
// this admin.
type TelemetryPage struct {
	Nav           Nav
	Flashes       []Flash
	Enabled       bool
	Hint          string // the token's first characters
	Created       string
	FromFlag      bool
	PreviousUntil string // the previous token is accepted until then ("" if not)
	NewToken      string // just rotated: shown this once
	IngestURL     string
	Snippet       string // the "telemetry" block of the plugin configuration
	TokenEnv      string // the VM environment variable carrying the token ("" if the admin sets none)
	Facts         []Fact
	MetricsURL    string
	MetricsAuth   bool // /metrics on this listener needs the admin token
}

// Fact is one labelled value.
type Fact struct {
	Label string
	Value string
}
