package policy

import (
	"encoding/json"
	"time"
)

// MarshalJSON renders the configuration in its normalized form: the
// "policies" layout with every default written out, tokens_per_second
// instead of its alias rps, header names lower-cased, each rule's effective
// mode, and match keys in sorted order. The output is deterministic and
// parses back to an identical Config, so the admin can store, diff and
// serve it.
func (c *Config) MarshalJSON() ([]byte, error) {
	if c == nil {
		return []byte("null"), nil
	}
	out := normConfig{
		Mode:             c.Mode,
		RejectStatus:     c.RejectStatus,
		RejectGRPCStatus: GRPCCodeName(c.RejectGRPCStatus),
		ResponseHeaders:  c.ResponseHeaders,
		LegacyHeaders:    c.LegacyHeaders,
		ShadowHeader:     c.ShadowHeader,
		TrustedHops:      c.TrustedHops,
		Policies:         make([]normPolicy, len(c.Policies)),
	}
	out.RejectBody, out.RejectContentType = normalizeReply(c.Reply)
	out.RejectHeaders = normalizeRejectHeaders(c.RejectHeaders)
	if t := c.Telemetry; t != nil {
		out.Telemetry = &normTelemetry{
			Cluster: t.Cluster, Authority: t.Authority, Path: t.Path, IntervalMS: t.IntervalMS,
			Token: t.Token, TokenEnv: t.TokenEnv, TopN: t.TopN, TimeoutMS: t.TimeoutMS,
		}
	}
	if f := c.Fleet; f != nil {
		nf := normFleet(*f)
		out.Fleet = &nf
	}
	for _, r := range c.Resets {
		out.Resets = append(out.Resets, normReset(r))
	}
	for i, p := range c.Policies {
		np := normPolicy{Name: p.Name, Rules: make([]normRule, len(p.Rules))}
		for j, r := range p.Rules {
			nr := normRule{
				Name:      r.Name,
				LimitKeys: make([]string, len(r.Keys)),
				Algorithm: r.Algorithm,
				Mode:      r.Mode,
			}
			if LimitsNothing(r.Action) { // actions.go
				nr.Action, nr.DenyStatus = r.Action, r.DenyStatus
				if len(r.Keys) == 0 {
					nr.LimitKeys = nil
				}
			} else {
				nr.MaxKeys = &r.MaxKeys
				nr.RejectStatus = r.RejectStatus
			}
			if r.Global {
				nr.Scope = ScopeGlobal
			}
			if r.ClearIdentity {
				nr.TelemetryIdentity = IdentityClear
			}
			nr.EnforcePercent = r.EnforcePercent
			nr.From, nr.Until = boundText(r.From), boundText(r.Until)
			nr.Schedule = normalizeSchedule(r.Schedule)
			if r.Unmarked {
				mark := false
				nr.ShadowMark = &mark
			}
			for k, key := range r.Keys {
				nr.LimitKeys[k] = key.String()
			}
			if len(r.Match) > 0 {
				nr.Match = make(map[string]any, len(r.Match))
				for _, m := range r.Match {
					if m.PathPrefix {
						nr.Match["path_prefix"] = m.Cond.Value
					} else {
						nr.Match[m.Source.String()] = conditionJSON(&m.Cond)
					}
				}
			}
			if tb := r.TokenBucket; tb != nil {
				nr.Config = &normTokenBucket{
					TokensPerSecond: tb.TokensPerSecond,
					Burst:           tb.Burst,
					CostSource:      tb.Cost.String(),
					FixedCost:       tb.FixedCost,
					DefaultCost:     tb.DefaultCost,
					MaxDelayMS:      tb.MaxDelayMS,
					BlockSeconds:    tb.BlockSeconds,
					MaxDebt:         debtOf(tb.Cost, tb.MaxDebt),
				}
			}
			if q := r.Quota; q != nil {
				nr.Config = &normQuota{Limit: q.Limit, Period: q.Period, TimeZone: q.TimeZone, CostSource: q.Cost.String(),
					FixedCost: q.FixedCost, DefaultCost: q.DefaultCost, MaxDebt: debtOf(q.Cost, q.MaxDebt)}
			}
			if w := r.Window; w != nil {
				nr.Config = normalizeWindow(r.Algorithm, w)
				if r.Algorithm == AlgorithmConcurrency {
					nr.Config = &normConcurrency{Limit: w.Limit, MaxRequestSeconds: w.WindowSeconds}
				}
			}
			nr.Overrides = normalizeOverrides(r.Overrides)
			nr.RejectBody, nr.RejectContentType = normalizeReply(r.Reply)
			nr.RejectHeaders = normalizeRejectHeaders(r.RejectHeaders)
			if l := r.LimitHeaders; l != nil {
				nr.LimitHeaders = &normLimitHeaders{l.Limit, l.Remaining, l.Reset}
			}
			np.Rules[j] = nr
		}
		out.Policies[i] = np
	}
	return json.Marshal(out)
}

type normConfig struct {
	Mode             Mode           `json:"mode"`
	RejectStatus     int            `json:"reject_status"`
	RejectGRPCStatus string         `json:"reject_grpc_status"`
	ResponseHeaders  bool           `json:"response_headers"`
	LegacyHeaders    LegacyHeaders  `json:"legacy_headers"`
	ShadowHeader     string         `json:"shadow_header"`
	TrustedHops      int            `json:"xff_trusted_hops"`
	Policies         []normPolicy   `json:"policies"`
	Telemetry        *normTelemetry `json:"telemetry,omitempty"`
	Fleet            *normFleet     `json:"fleet,omitempty"`
	// Written only when set, with the content type filled in.
	RejectBody        *string            `json:"reject_body,omitempty"`
	RejectContentType string             `json:"reject_content_type,omitempty"`
	RejectHeaders     *map[string]string `json:"reject_headers,omitempty"`
	Resets            []normReset        `json:"resets,omitempty"`
}

// normReset is Reset with its JSON names.
type normReset struct {
	ID   string `json:"id"`
	Rule string `json:"rule"`
	Key  string `json:"key,omitempty"`
	All  bool   `json:"all,omitempty"`
}

// normalizeReply writes a custom reply out, its content type explicit
// (none for an empty body without one).
func normalizeReply(r *Reply) (*string, string) {
	if r == nil {
		return nil, ""
	}
	body := r.Body
	return &body, r.ContentType
}

// normLimitHeaders is LimitHeaders with its JSON names.
type normLimitHeaders struct {
	Limit     string `json:"limit,omitempty"`
	Remaining string `json:"remaining,omitempty"`
	Reset     string `json:"reset,omitempty"`
}

// normalizeRejectHeaders writes "reject_headers" out as an object (its
// names sorted by encoding/json), nil when not given.
func normalizeRejectHeaders(hs []RejectHeader) *map[string]string {
	if hs == nil {
		return nil
	}
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Name] = h.Value
	}
	return &m
}

// normFleet is Fleet with its JSON names (same fields, same order).
type normFleet struct {
	Cluster        string `json:"cluster"`
	Authority      string `json:"authority"`
	Domain         string `json:"domain"`
	TimeoutMS      int    `json:"timeout_ms"`
	SyncIntervalMS int    `json:"sync_interval_ms"`
	LeaseMin       int    `json:"lease_min"`
	LeaseMax       int    `json:"lease_max"`
	LeaseTTLMS     int    `json:"lease_ttl_ms"`
	OnBackendDown  string `json:"on_backend_down"`
	FleetSize      int    `json:"fleet_size"`
}

type normTelemetry struct {
	Cluster    string `json:"cluster"`
	Authority  string `json:"authority"`
	Path       string `json:"path"`
	IntervalMS int    `json:"interval_ms"`
	Token      string `json:"token,omitempty"`     // exactly one of token and token_env
	TokenEnv   string `json:"token_env,omitempty"` // is set
	TopN       int    `json:"top_n"`
	TimeoutMS  int    `json:"timeout_ms"`
}

type normPolicy struct {
	Name  string     `json:"name"`
	Rules []normRule `json:"rules"`
}

type normRule struct {
	Name       string `json:"name"`
	Action     string `json:"action,omitempty"`      // written for exempt and deny only
	DenyStatus int    `json:"deny_status,omitempty"` // deny only
	// Written only when set (limit rules): the configuration's otherwise.
	RejectStatus int            `json:"reject_status,omitempty"`
	LimitKeys    []string       `json:"limit_keys,omitempty"`
	Match        map[string]any `json:"match,omitempty"` // encoding/json sorts map keys
	Algorithm    string         `json:"algorithm,omitempty"`
	Config       any            `json:"algorithm_config,omitempty"` // *normTokenBucket, *normWindow or *normQuota
	Mode         Mode           `json:"mode"`
	MaxKeys      *int           `json:"max_keys,omitempty"` // limit rules only
	Overrides    []normOverride `json:"overrides,omitempty"`
	// Written only when "clear": the default ("masked") is left out so that
	// configurations without telemetry normalize as before.
	TelemetryIdentity string `json:"telemetry_identity,omitempty"`
	// Written only when "global", for the same reason.
	Scope string `json:"scope,omitempty"`
	// Written only when false, for the same reason.
	ShadowMark *bool `json:"shadow_mark,omitempty"`
	// Written only when set, for the same reason.
	EnforcePercent *float64 `json:"enforce_percent,omitempty"`
	// Written only when set, for the same reason.
	RejectBody        *string `json:"reject_body,omitempty"`
	RejectContentType string  `json:"reject_content_type,omitempty"`
	// Written only when set (an empty object too: it sends none of the
	// configuration's), for the same reason.
	RejectHeaders *map[string]string `json:"reject_headers,omitempty"`
	// Written only when set, for the same reason.
	LimitHeaders *normLimitHeaders `json:"limit_headers,omitempty"`
	// Written only when set, for the same reason.
	From     string        `json:"from,omitempty"`
	Until    string        `json:"until,omitempty"`
	Schedule *normSchedule `json:"schedule,omitempty"`
}

// normalizeSchedule writes a rule's or an override's schedule out (nil
// for none).
func normalizeSchedule(sc *Schedule) *normSchedule {
	if sc == nil {
		return nil
	}
	return &normSchedule{Days: sc.dayNames(), From: clockText(sc.From), Until: clockText(sc.Until), TimeZone: sc.TimeZone}
}

// normSchedule is a schedule with every field written out.
type normSchedule struct {
	Days     []string `json:"days"`
	From     string   `json:"from"`
	Until    string   `json:"until"`
	TimeZone string   `json:"time_zone"`
}

type normTokenBucket struct {
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           float64 `json:"burst"`
	CostSource      string  `json:"cost_source"`
	FixedCost       float64 `json:"fixed_cost"`
	DefaultCost     float64 `json:"default_cost"`
	// Written only when set, so that configurations without delays
	// normalize as before.
	MaxDelayMS   int `json:"max_delay_ms,omitempty"`
	BlockSeconds int `json:"block_seconds,omitempty"`
	// Written only with a response cost source.
	MaxDebt *float64 `json:"max_debt,omitempty"`
}

type normQuota struct {
	Limit       float64  `json:"limit"`
	Period      string   `json:"period"`
	TimeZone    string   `json:"time_zone"`
	CostSource  string   `json:"cost_source"`
	FixedCost   float64  `json:"fixed_cost"`
	DefaultCost float64  `json:"default_cost"`
	MaxDebt     *float64 `json:"max_debt,omitempty"` // with a response cost source only
}

// debtOf is max_debt as normalized: written (even 0) exactly when the cost
// comes from the response.
func debtOf(cs CostSource, debt float64) *float64 {
	if !cs.FromResponse() {
		return nil
	}
	return &debt
}

type normWindow struct {
	Limit         float64 `json:"limit"`
	WindowSeconds int     `json:"window_seconds"`
	PeriodSeconds int     `json:"period_seconds,omitempty"` // rolling_window only
	MaxPerPeriod  float64 `json:"max_per_period,omitempty"` // rolling_window only, when set
	CostSource    string  `json:"cost_source"`
	FixedCost     float64 `json:"fixed_cost"`
	DefaultCost   float64 `json:"default_cost"`
}

func normalizeWindow(alg string, w *Window) *normWindow {
	nw := &normWindow{
		Limit:         w.Limit,
		WindowSeconds: w.WindowSeconds,
		CostSource:    w.Cost.String(),
		FixedCost:     w.FixedCost,
		DefaultCost:   w.DefaultCost,
	}
	if alg == AlgorithmRollingWindow {
		nw.PeriodSeconds, nw.MaxPerPeriod = w.PeriodSeconds, w.MaxPerPeriod
	}
	return nw
}

// normOverride is an override with only the limits it can set.
type normOverride struct {
	Key      string        `json:"key"`
	Config   any           `json:"algorithm_config"`
	From     string        `json:"from,omitempty"`
	Until    string        `json:"until,omitempty"`
	Schedule *normSchedule `json:"schedule,omitempty"`
}

// boundText writes a rule's or an override's bound in UTC (RFC 3339).
func boundText(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

type normOverrideTB struct {
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           float64 `json:"burst"`
}

type normOverrideWindow struct {
	Limit        float64 `json:"limit"`
	MaxPerPeriod float64 `json:"max_per_period,omitempty"`
}

func normalizeOverrides(os []Override) []normOverride {
	if len(os) == 0 {
		return nil
	}
	out := make([]normOverride, len(os))
	for i, o := range os {
		out[i].Key = o.Key
		out[i].From, out[i].Until = boundText(o.From), boundText(o.Until)
		out[i].Schedule = normalizeSchedule(o.Schedule)
		switch {
		case o.TokenBucket != nil:
			out[i].Config = normOverrideTB{TokensPerSecond: o.TokenBucket.TokensPerSecond, Burst: o.TokenBucket.Burst}
		case o.Window != nil:
			out[i].Config = normOverrideWindow{Limit: o.Window.Limit, MaxPerPeriod: o.Window.MaxPerPeriod}
		case o.Quota != nil:
			out[i].Config = normOverrideWindow{Limit: o.Quota.Limit}
		}
	}
	return out
}
