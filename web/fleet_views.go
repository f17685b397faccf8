package web

// FleetSection is the dashboard's "Global rules" section: fleet mode's
// rules, their use across the fleet as this admin answered it (RLS), each
// node's lease as the node reports it (Telemetry), and the health of the
// backend from both sides. Either view may be missing. Values are
// formatted.
type FleetSection struct {
	RLS       bool // this admin serves the rate limit service (-rls-listen)
	Telemetry bool // some node reports its fleet view
	// Node-side summary: nodes reporting a fleet view, those whose
	// backend is down, those in fallback on some rule.
	ReportingNodes int
	NodesDown      int
	NodesFallback  int
	Backend        string // "redis 10.0.0.7:6379"
	Up             bool
	Status         string // "up", "down", "not checked yet"
	Checked        string // "2 s ago"
	Latency        string // of the last success: "0.4 ms"
	LastError      string // "" when none since start
	ErrorAt        string
	Errors         string // failures since start
	Nodes          int    // nodes seen in the last 30 s
	Rules          []FleetRule
}

// FleetRule is one global rule in one domain ("" domain: no use yet).
type FleetRule struct {
	Name     string
	Domain   string
	Limit    string // "10/s, burst 20"; "not in the policy" for a rule only seen in calls
	Known    bool
	Granted  string // tokens per second, last 10 s, all nodes
	Denied   string
	Returned string
	// Charged: response costs the nodes' pools could not pay, per second;
	// Charges: the rule had any in the last 10 s (the column shows then).
	Charged string
	Charges bool
	// Blocked: the identities the service blocked in the last 10 s
	// (block_seconds), shown when any.
	Blocked  string
	Leased   string // tokens held in leases now, every fresh node (telemetry)
	Fallback int    // fresh nodes in fallback on this rule
	Nodes    []FleetNode
}

// FleetNode is one node's use of a global rule: what the RLS answered it
// (HasRLS) and what it reports holding (HasTelemetry).
type FleetNode struct {
	ID        string // "(no id)" when the node sent none
	HasRLS    bool
	LastLease string // tokens of its last grant
	Granted   string // tokens in the last 10 s
	Returned  string
	Denied    string
	Charged   string // response costs charged in the last 10 s
	Seen      string // "1 s ago"

	HasTelemetry bool
	Held         string // "12.5 in 3 pools"
	Fallback     bool   // serving without the rate limit service
	Mode         string // the fallback: "local share (1/3)", "allow", "deny", "mode unknown"
	BackendUp    bool   // the rate limit service answered the node's last call
	Reported     string // "1 s ago"
	Stale        bool   // the node stopped reporting: its numbers are old
}

// boolAttr is a boolean as a data attribute's value, for scripts and tests.
func boolAttr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
