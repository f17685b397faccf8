package web

// FleetSection is the dashboard's "Global rules" section: fleet mode's
// rules, their use across the fleet as this admin answered it, each node's
// lease, and the health of the Redis backend. Values are formatted.
type FleetSection struct {
	Backend   string // "redis 10.0.0.7:6379"
	Up        bool
	Status    string // "up", "down", "not checked yet"
	Checked   string // "2 s ago"
	Latency   string // of the last success: "0.4 ms"
	LastError string // "" when none since start
	ErrorAt   string
	Errors    string // failures since start
	Nodes     int    // nodes seen in the last 30 s
	Rules     []FleetRule
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
	Nodes    []FleetNode
}

// FleetNode is one node's use of a global rule.
type FleetNode struct {
	ID        string // "(no id)" when the node sent none
	LastLease string // tokens of its last grant
	Granted   string // tokens in the last 10 s
	Returned  string
	Denied    string
	Seen      string // "1 s ago"
}
