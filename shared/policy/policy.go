// Package policy parses and validates Sluice's plugin configuration: the JSON
// the filter receives in proxy_on_configure and that the admin edits. The
// filter and the admin call the very same Parse, so a configuration the admin
// accepts is one the filter accepts.
//
// The reference for every field is docs/configuration.md.
package policy

import "strings"

// Mode says whether a rule rejects requests or only reports what it would do.
type Mode string

const (
	ModeEnforce Mode = "enforce" // reject requests over the limit
	ModeShadow  Mode = "shadow"  // never reject; count, log and mark the upstream request (unless "shadow_mark": false)
)

// Defaults of the top-level options.
const (
	DefaultRejectStatus = 429
	DefaultShadowHeader = "x-sluice-shadow"
	DefaultPolicyName   = "default" // the policy built from a top-level "rules"
	MaxTrustedHops      = 10
	MaxBurst            = 1e12
	MaxNameLen          = 64

	// DefaultMaxKeys is a rule's max_keys when the configuration does not
	// set one: the rule keeps the buckets of at most this many identities
	// (in a quarter as many shared-data keys, four to a key), whatever the
	// number of distinct identities.
	DefaultMaxKeys = 65536
	// MaxMaxKeys is the largest max_keys accepted (2^22). At the longest
	// identity (256 bytes) a bucket takes about 290 bytes of shared data, so
	// one rule stays under about 1.3 GB; with IP addresses about 40 bytes.
	MaxMaxKeys = 4194304

	// MaxDelayMS is the largest token_bucket max_delay_ms accepted (60 s).
	// A delayed request holds its stream open for that long: Envoy's
	// stream_idle_timeout (default 300 s) and any request_timeout, and the
	// clients' own timeouts, must be longer.
	MaxDelayMS = 60000
	// MaxBlockSeconds is the largest token_bucket block_seconds accepted
	// (a week).
	MaxBlockSeconds = 7 * 24 * 3600
)

// Algorithm names.
const (
	AlgorithmTokenBucket   = "token_bucket"
	AlgorithmFixedWindow   = "fixed_window"   // window.go
	AlgorithmSlidingWindow = "sliding_window" // window.go
	AlgorithmRollingWindow = "rolling_window" // window.go
)

// Config is the plugin configuration, parsed and normalized: every default is
// filled in, so consumers never look at JSON again.
type Config struct {
	Mode         Mode // "mode", default enforce
	RejectStatus int  // "reject_status", default 429, 400..599
	// RejectGRPCStatus is "reject_grpc_status": the gRPC status code of a
	// limit rule's rejection of a gRPC request, default 8
	// (resource_exhausted); grpc.go.
	RejectGRPCStatus int
	ResponseHeaders  bool           // "response_headers", default true
	LegacyHeaders    LegacyHeaders  // "legacy_headers", default none; legacy_headers.go
	ShadowHeader     string         // "shadow_header", default "x-sluice-shadow"
	TrustedHops      int            // "xff_trusted_hops", default 0 (X-Forwarded-For ignored; use source.address)
	Policies         []Policy       // top-level "rules" shorthand becomes one policy named "default"
	Telemetry        *Telemetry     // "telemetry", optional: periodic reports to the admin (nil = off)
	Fleet            *Fleet         // "fleet", optional: the rate limit service of global rules (fleet.go)
	Reply            *Reply         // "reject_body", "reject_content_type": limit rules' rejection body (nil: the filter's JSON); reply.go
	RejectHeaders    []RejectHeader // "reject_headers": limit rules' extra rejection fields, sorted (nil: none); reject_headers.go
	Resets           []Reset        // "resets": identities whose state the filter forgets, written by the admin (resets.go)
}

// Telemetry configures the filter's periodic reports to the admin (contract
// D, docs/filter.md "Telemetry"): dispatch_http_call to Cluster every
// IntervalMS from every worker VM.
type Telemetry struct {
	Cluster    string // "cluster", required: the Envoy cluster of the admin
	Authority  string // "authority", default "sluice-admin"
	Path       string // "path", default "/api/v1/telemetry"
	IntervalMS int    // "interval_ms", default 1000, 100..60000
	Token      string // "token": sent as "authorization: Bearer <token>"; never logged
	TokenEnv   string // "token_env": the VM environment variable holding the token; exactly one of Token and TokenEnv is set
	TopN       int    // "top_n", default 50, 1..1000: the most buckets per report
	TimeoutMS  int    // "timeout_ms", default 500, less than interval_ms
}

// Telemetry defaults and bounds.
const (
	DefaultTelemetryAuthority = "sluice-admin"
	MaxEnvNameLen             = 128 // the longest token_env
	DefaultTelemetryPath      = "/api/v1/telemetry"
	DefaultTelemetryInterval  = 1000
	MinTelemetryInterval      = 100
	MaxTelemetryInterval      = 60000
	DefaultTelemetryTopN      = 50
	MaxTelemetryTopN          = 1000
	DefaultTelemetryTimeout   = 500
)

// Telemetry identity display (per rule "telemetry_identity").
const (
	IdentityMasked = "masked" // header: and jwt: components masked (default)
	IdentityClear  = "clear"  // every component shown as is
)

// Policy is a named, ordered list of rules. Within a policy the first rule
// whose match holds applies; every policy applies.
type Policy struct {
	Name  string
	Rules []Rule
}

// Rule is one limit.
type Rule struct {
	Name        string
	Policy      string       // owning policy name
	Keys        []KeySource  // from "limit_keys", in order
	Match       []Matcher    // from "match", sorted by source name for determinism
	Algorithm   string       // one of the Algorithm* names
	TokenBucket *TokenBucket // set when Algorithm == "token_bucket"
	Window      *Window      // set when Algorithm is fixed_window, sliding_window or rolling_window
	Quota       *Quota       // set when Algorithm is "quota" (quota.go)
	Mode        Mode         // effective mode (rule's, else config's)
	// Unmarked is "shadow_mark": false: in shadow mode the rule counts and
	// logs what it would have refused but never names itself in the shadow
	// header, nor makes the filter touch that header. No effect in enforce
	// mode. The zero value marks, as shadow rules always did.
	Unmarked bool
	// EnforcePercent is "enforce_percent" of a limit rule in enforce mode
	// (rollout.go): the rule refuses only the identities of that share
	// (request.Enforced) and treats the others as in shadow mode. nil
	// enforces on every identity, as does 100.
	EnforcePercent *float64
	// MaxKeys is "max_keys": the most identities whose buckets (or windows)
	// The rule keeps at once, four to a shared-data key (so at most
	// MaxKeys/4 keys, rounded up), 1 to MaxMaxKeys; Parse fills in DefaultMaxKeys when
	// it is absent. 0 means unbounded: one exact key per identity
	// ("tb:{rule}:{composite}", the Fairvisor token bucket's format), which grows the proxy's
	// memory with every distinct identity. A Rule built by hand rather than
	// by Parse must set it, or it gets the unbounded behaviour.
	MaxKeys int
	// ClearIdentity is "telemetry_identity": "clear": telemetry reports show
	// The rule's header: and jwt: key components unmasked (default masked).
	ClearIdentity bool
	// Global is "scope": "global" (default "local"): the rule's limit holds
	// across every Envoy process connected to the fleet backend (fleet.go).
	Global bool
	// Action is "action" (actions.go): ActionLimit (the default),
	// ActionExempt, ActionUnlimited or ActionDeny. Those three have no
	// algorithm.
	Action string
	// DenyStatus is "deny_status" of a deny rule (default 403), else 0.
	DenyStatus int
	// RejectStatus is "reject_status" of a limit rule: the HTTP status of
	// its rejections, 0 for the configuration's (Config.RejectStatusOf).
	RejectStatus int
	// Overrides is "overrides" of a limit rule (actions.go): per-identity
	// limits, keys unique, in the order written.
	Overrides []Override
	// Reply is the rule's "reject_body" and "reject_content_type" (limit
	// and deny rules; reply.go): nil sends the configuration's
	// (Config.RejectReply).
	Reply *Reply
	// LimitHeaders is a limit rule's "limit_headers" (limit_headers.go):
	// names its own numbers are sent under, nil for none.
	LimitHeaders *LimitHeaders
	// RejectHeaders is the rule's "reject_headers" (limit and deny rules;
	// reject_headers.go), sorted by name: nil sends the configuration's
	// (Config.RejectHeadersOf), empty sends none.
	RejectHeaders []RejectHeader
	// Bounds are "from" and "until": the rule applies only between them
	// (actions.go). Outside, it is passed over as a rule whose match does
	// not hold: the next rule of its policy is tried.
	Bounds
	// Schedule is "schedule" (schedule.go): the days and times of day the
	// rule applies, week after week; nil for always. Outside, it is passed
	// over as outside its Bounds.
	Schedule *Schedule
}

// SourceKind is where a key or match value is read from.
type SourceKind int

const (
	SourceIP     SourceKind = iota + 1 // "ip:address": the client address
	SourceHeader                       // "header:<name>"
	SourceQuery                        // "query:<name>"
	SourceJWT                          // "jwt:<claim>": a claim of the bearer token's payload
	SourcePath                         // "path": the request path without the query string
	SourceMethod                       // "method"
	SourceHost                         // "host": the :authority
	// SourcePeer is "peer:principal": the first URI SAN of the client's
	// TLS certificate (Envoy's connection.uri_san_peer_certificate), the
	// calling workload's SPIFFE ID under Istio mutual TLS.
	SourcePeer
	// SourceRoute is "route": the name of the Envoy route the request
	// matched (Envoy's xds.route_name; an Istio VirtualService's
	// http[].name).
	SourceRoute
	// SourceMetadata is "metadata:<namespace>:<key>[.<key>...]": a value of
	// the request's Envoy dynamic metadata, which filters before Sluice
	// write (jwt_authn's verified claims, json_to_metadata's body fields,
	// ext_authz's answers). Name is "<namespace>:<keys>" (metadata.go).
	SourceMetadata
	// SourceCookie is "cookie:<name>": the value of a cookie of the
	// request's Cookie header (request.CookieValue).
	SourceCookie
	// SourceAll is "all": the same value for every request (AllValue), so
	// a rule keyed by it alone has one bucket for every request it applies
	// to, like Envoy local_ratelimit's bucket of a listener or route.
	SourceAll
	// SourceIPNetwork is "ip:network[:<v4 bits>:<v6 bits>]": the client
	// address's network, the address masked to a prefix (default /24 for
	// IPv4, /64 for IPv6, the block a household or a host usually has),
	// written as the prefix ("203.0.113.0/24"). Name holds the bits,
	// "24:64" (ip.go).
	SourceIPNetwork
	// SourceCluster is "cluster": the name of the upstream cluster the
	// request's route sends it to (Envoy's xds.cluster_name; under Istio,
	// outbound|<port>|<subset>|<service FQDN>), for a limit per backend
	// whatever route leads to it. A route without a cluster (a direct
	// response, a redirect) has none: the value is missing.
	SourceCluster
	// SourceConnection is "connection": the downstream connection's number
	// (Envoy's connection.id, unique within an Envoy process), written in
	// decimal, for a bucket per connection like local_ratelimit's
	// local_rate_limit_per_downstream_connection: a client's requests over
	// one keep-alive or HTTP/2 connection share it. It is a key only: the
	// numbers mean nothing to match on, nor across Envoys.
	SourceConnection
)

// AllValue is the value of the "all" source.
const AllValue = "*"

// KeySource names one request attribute.
type KeySource struct {
	Kind SourceKind
	Name string // header (lower-cased), query parameter, claim or cookie name, metadata "<namespace>:<keys>"; "" otherwise
}

// String returns the source in configuration syntax: "header:x-api-key",
// "ip:address", "path", ...
func (k KeySource) String() string {
	switch k.Kind {
	case SourceIP:
		return "ip:address"
	case SourceHeader:
		return "header:" + k.Name
	case SourceQuery:
		return "query:" + k.Name
	case SourceJWT:
		return "jwt:" + k.Name
	case SourcePath:
		return "path"
	case SourceMethod:
		return "method"
	case SourceHost:
		return "host"
	case SourcePeer:
		return "peer:principal"
	case SourceRoute:
		return "route"
	case SourceCluster:
		return "cluster"
	case SourceConnection:
		return "connection"
	case SourceMetadata:
		return "metadata:" + k.Name
	case SourceCookie:
		return "cookie:" + k.Name
	case SourceAll:
		return "all"
	case SourceIPNetwork:
		if k.Name == DefaultNetworkBits {
			return "ip:network"
		}
		return "ip:network:" + k.Name
	}
	return "invalid"
}

// TokenBucket is the token_bucket algorithm_config (the Fairvisor token bucket design).
type TokenBucket struct {
	TokensPerSecond float64 // from tokens_per_second or alias rps
	Burst           float64
	Cost            CostSource
	FixedCost       float64 // default 1
	DefaultCost     float64 // default 1
	// MaxDelayMS is "max_delay_ms": delayed admission (docs/filter.md
	// "Delayed admission"). A request that would have to wait at most this
	// many milliseconds for its tokens reserves them and is paused until
	// then instead of being rejected. 0 (the default) turns it off.
	MaxDelayMS int
	// MaxDebt is "max_debt" with a response cost source: how far below
	// empty a response's cost may take the bucket (default Burst). 0
	// otherwise.
	MaxDebt float64
	// BlockSeconds is "block_seconds": once the rule refuses an identity
	// (its bucket empty, not in debt), the identity is refused for this
	// many seconds more, its bucket put that much refill below empty
	// (limiter.TokenBucket.Block). 0 (the default) blocks nothing.
	BlockSeconds int
}

// CostKind is where a request's cost comes from.
type CostKind int

const (
	CostFixed  CostKind = iota // every request costs FixedCost
	CostHeader                 // the value of header Name, else DefaultCost
	CostQuery                  // the value of query parameter Name, else DefaultCost
	// CostMetadata: the value of the dynamic metadata source Name
	// ("<namespace>:<keys>", metadata.go), a decimal string or a number as
	// Envoy passes it, else DefaultCost.
	CostMetadata
	// CostResponseHeader and CostResponseTrailer: the cost is read from
	// the response (header or trailer Name) and charged when it arrives;
	// the request is admitted while the bucket or quota has something left,
	// and a response that reports none is charged DefaultCost.
	CostResponseHeader
	CostResponseTrailer
	// CostResponseStatus: a response whose status is in Statuses is
	// charged FixedCost when it arrives, any other response nothing; the
	// request is admitted while the bucket or quota has something left.
	// For limits on what fails, such as login attempts.
	CostResponseStatus
	// CostResponseGRPCStatus: the same for a gRPC call's status (its
	// grpc-status trailer, or header of a trailers-only response), one of
	// GRPCCodes.
	CostResponseGRPCStatus
	// CostResponseJSON: the cost is the sum of the numbers at paths
	// (Name, "usage.total_tokens" or "a.b+c.d") in the response body, JSON
	// or server-sent events of JSON (package bodyscan), charged when the
	// body ends; otherwise as CostResponseHeader.
	CostResponseJSON
	// CostResponseBytes: the cost is the number of bytes of the response
	// body, counted as it passes and charged when it ends (a stream that
	// ends first: the bytes that passed). A response without a body costs
	// nothing. Otherwise as CostResponseHeader.
	CostResponseBytes
)

// FromResponse reports whether the cost is read from the response.
func (c CostSource) FromResponse() bool {
	return c.Kind == CostResponseHeader || c.Kind == CostResponseTrailer || c.Kind == CostResponseJSON || c.Kind == CostResponseBytes || c.ByStatus()
}

// ByStatus reports whether the cost is charged by the response's status
// (HTTP or gRPC): a known cost, charged for some responses only.
func (c CostSource) ByStatus() bool {
	return c.Kind == CostResponseStatus || c.Kind == CostResponseGRPCStatus
}

// CostSource is a parsed "cost_source".
type CostSource struct {
	Kind CostKind
	Name string // header (lower-cased) or query parameter name; a CostResponseJSON's paths
	// Statuses: the statuses a CostResponseStatus source counts.
	Statuses StatusSet
	// GRPCCodes: the gRPC status codes a CostResponseGRPCStatus source
	// counts, bit c for code c.
	GRPCCodes GRPCCodeSet
}

// String returns the cost source in configuration syntax.
func (c CostSource) String() string {
	switch c.Kind {
	case CostHeader:
		return "header:" + c.Name
	case CostQuery:
		return "query:" + c.Name
	case CostMetadata:
		return "metadata:" + c.Name
	case CostResponseHeader:
		return "response_header:" + c.Name
	case CostResponseTrailer:
		return "response_trailer:" + c.Name
	case CostResponseStatus:
		return "response_status:" + c.Statuses.String()
	case CostResponseGRPCStatus:
		return "response_grpc_status:" + c.GRPCCodes.String()
	case CostResponseJSON:
		return "response_json:" + c.Name
	case CostResponseBytes:
		return "response_bytes"
	}
	return "fixed"
}

// FieldError is one configuration problem at a JSON path such as
// "policies[0].rules[1].algorithm_config.burst" ("" for the whole document).
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error returns "<path>: <message>".
func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Errors is every problem found in a configuration, object by object in
// document order (within an object, unknown and duplicate fields first).
type Errors []FieldError

// Error returns one line per problem.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// RuleByName returns the rule with the given name, or nil.
func (c *Config) RuleByName(name string) *Rule {
	if c == nil {
		return nil
	}
	for i := range c.Policies {
		for j := range c.Policies[i].Rules {
			if c.Policies[i].Rules[j].Name == name {
				return &c.Policies[i].Rules[j]
			}
		}
	}
	return nil
}
