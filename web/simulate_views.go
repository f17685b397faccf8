package web

// SimForm is the simulator's form on the policy page, as last submitted.
type SimForm struct {
	Against string // "draft", "current" or "version"
	Version string // with Against "version"
	Method  string
	Path    string // with its query string
	Host    string
	Headers string // "name: value" per line
	Client  string // client address
	Peer    string // the client certificate's URI SAN (peer:principal)
	Route   string // the Envoy route's name (route)
	Cluster string // the upstream cluster's name (cluster)
	// Connection is the downstream connection's number (connection).
	Connection string
	// Metadata is the Envoy dynamic metadata as JSON (metadata: sources).
	Metadata string
	JWT      string // a bearer token, or a JSON object of claims
	// A sample of the upstream's answer, for rules charged from the
	// response: status, "name: value" lines, body. All empty: none.
	RespStatus   string
	RespHeaders  string
	RespTrailers string
	RespBody     string
}

// SimView is a simulation's outcome.
type SimView struct {
	Error   string // the request or policy was refused: why (with Field)
	Field   string
	Policy  string // what ran: "the draft", "v3", ...
	Allowed bool
	Status  int
	// GRPCStatus names the status a gRPC call receives instead of Status.
	GRPCStatus string
	Rule       string
	Headers    [][2]string
	Upstream   [][2]string
	Body       string
	// Details are the rejection's response code details, as Envoy's
	// access logs print them.
	Details  string
	DelayMS  int64
	Policies []SimPolicyView
	// AsTest is the request as a policy test, with what it gets from
	// fresh state ("" when it cannot be written).
	AsTest string
}

// SimPolicyView is one policy's rules for the simulated request.
type SimPolicyView struct {
	Name  string
	Rules []SimRuleView
}

// SimRuleView is one rule for the simulated request.
type SimRuleView struct {
	Name     string
	Applies  bool
	Why      string
	Mode     string
	Identity string
	Cost     string
	State    string // "10.0 of 20 tokens (from telemetry)" or "new bucket: 20 tokens"
	Decision string // "allowed, 9 left" / "would reject: retry in 3 s"
	Rejects  bool
	// Response: what a rule charged from the response charges for the
	// sample response ("charged 120 (response body usage.total_tokens),
	// leaving 880"), or that it needs one; "" for other rules.
	Response string
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
