package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policycheck"
	"github.com/sluice-rl/sluice/shared/simulate"
	"github.com/sluice-rl/sluice/shared/state"
)

// The request simulator (docs/admin.md "Request simulator"): POST
// /api/v1/policy/simulate and the simulator on the policy page run
// shared/simulate on a request and a policy (the current one, a stored
// version or an unsaved draft), with the bucket states telemetry knows.

// buildSimRequest is b.Build with its refusals as the API's input errors.
func buildSimRequest(b simulate.RequestSpec) (simulate.Request, error) {
	req, err := b.Build()
	var fe *simulate.FieldError
	if errors.As(err, &fe) {
		return req, &policies.InputError{Field: "request." + fe.Field, Message: fe.Message}
	}
	return req, err
}

// simPolicy is the policy a simulation runs against: the draft when given,
// else the stored version when given, else the current one.
type simPolicy struct {
	cfg   *policy.Config
	label string // "the current policy (v3)", "v2", "the draft"
}

func (s *server) loadSimPolicy(ctx context.Context, draft []byte, version *int64) (simPolicy, error) {
	if string(draft) == "null" { // JSON's null: no draft
		draft = nil
	}
	if len(draft) > 0 && version != nil {
		return simPolicy{}, &policies.InputError{Field: "version", Message: "give a draft policy or a version, not both"}
	}
	label := "the draft"
	if len(draft) == 0 {
		var v policies.Version
		var err error
		if version != nil {
			v, err = s.Policies.Get(ctx, *version)
			label = "v" + strconv.FormatInt(*version, 10)
		} else {
			v, err = s.Policies.Current(ctx)
			label = fmt.Sprintf("the current policy (v%d)", v.Number)
		}
		if err != nil {
			return simPolicy{}, err
		}
		draft = v.JSON
	}
	norm, err := policies.Validate(draft) // refused like a save, with every error
	if err != nil {
		return simPolicy{}, err
	}
	cfg, err := policy.Parse(norm)
	if err != nil {
		return simPolicy{}, err
	}
	return simPolicy{cfg: cfg, label: label}, nil
}

// telemetryLookup returns the bucket states telemetry reported (token
// buckets: windows are reported as their quota left, not their counts,
// so they are simulated fresh). nil without telemetry.
func (s *server) telemetryLookup(now time.Time) simulate.Lookup {
	if s.Telemetry == nil {
		return nil
	}
	st := s.Telemetry.State
	return func(r *policy.Rule, identity string) (simulate.State, bool) {
		if r.Window != nil {
			return simulate.State{}, false
		}
		keys, _ := st.Search(now, identity, 100)
		for _, k := range keys {
			if k.Rule == r.Name && k.Identity == identity && k.Algorithm == "" {
				return simulate.State{Bucket: state.Bucket{Tokens: k.Tokens, LastRefill: k.LastRefill}}, true
			}
		}
		return simulate.State{}, false
	}
}

// simResultJSON is the API's answer.
type simResultJSON struct {
	Policy   string          `json:"policy"`
	Decision simDecisionJSON `json:"decision"`
	Policies []simPolicyJSON `json:"policies"`
	// AsTest is the request as a policy test (YAML), with what it gets
	// from fresh state.
	AsTest string `json:"as_test,omitempty"`
}

type simDecisionJSON struct {
	Allowed         bool        `json:"allowed"`
	Status          int         `json:"status,omitempty"`
	Rule            string      `json:"rule,omitempty"`
	Headers         [][2]string `json:"headers"`
	Body            string      `json:"body,omitempty"`
	GRPCStatus      string      `json:"grpc_status,omitempty"` // a gRPC call's status, by name
	Details         string      `json:"response_code_details,omitempty"`
	UpstreamHeaders [][2]string `json:"upstream_headers,omitempty"`
	DelayMS         int64       `json:"delay_ms,omitempty"`
}

type simPolicyJSON struct {
	Name    string        `json:"name"`
	Applied string        `json:"applied_rule,omitempty"`
	Rules   []simRuleJSON `json:"rules"`
}

type simRuleJSON struct {
	Name      string  `json:"name"`
	Mode      string  `json:"mode"`
	Algorithm string  `json:"algorithm,omitempty"`
	Action    string  `json:"action"`
	Applies   bool    `json:"applies"`
	Why       string  `json:"why_not,omitempty"`
	Identity  string  `json:"identity,omitempty"`
	Cost      float64 `json:"cost,omitempty"`
	// StateKnown: telemetry reported this identity's bucket; Level is
	// the tokens (quota) available before the request either way.
	StateKnown bool          `json:"state_known,omitempty"`
	Level      *float64      `json:"level,omitempty"`
	Decision   *simRuleDecis `json:"decision,omitempty"`
	Global     bool          `json:"global,omitempty"`
	// Overridden: one of the rule's overrides gave this identity its
	// limits; ChargedLater: the cost comes from the response; Spared:
	// the rule is enforced on a share of its identities, not this one.
	Overridden   bool `json:"overridden,omitempty"`
	ChargedLater bool `json:"charged_later,omitempty"`
	Spared       bool `json:"spared,omitempty"`
	// Blocked: the rule's refusal puts the identity in its block
	// (block_seconds); the decision's wait covers it.
	Blocked bool `json:"blocked,omitempty"`
	// Response: what the sample response is charged (charged_later
	// rules that admitted the request, when the request has a response).
	Response *simChargeJSON `json:"response,omitempty"`
}

type simChargeJSON struct {
	Charged   bool    `json:"charged"`
	Cost      float64 `json:"cost"`
	Why       string  `json:"why"`
	Remaining float64 `json:"remaining_after"`
}

type simRuleDecis struct {
	Allowed   bool    `json:"allowed"`
	Remaining float64 `json:"remaining"`
	Wait      float64 `json:"wait_seconds,omitempty"`
	Reset     float64 `json:"reset_seconds"`
	Delay     float64 `json:"delay_seconds,omitempty"`
}

func simJSON(label string, res simulate.Result) simResultJSON {
	out := simResultJSON{Policy: label, Decision: simDecisionJSON{
		Allowed: res.Status == 0, Status: res.Status, Rule: res.Rule, Headers: res.Headers,
		Body: res.Body, Details: res.Details, UpstreamHeaders: res.Upstream, DelayMS: res.DelayMS,
	}, Policies: []simPolicyJSON{}}
	if res.GRPCStatus != 0 {
		out.Decision.GRPCStatus = policy.GRPCCodeName(res.GRPCStatus)
	}
	if out.Decision.Headers == nil {
		out.Decision.Headers = [][2]string{}
	}
	for _, p := range res.Policies {
		pj := simPolicyJSON{Name: p.Name, Rules: []simRuleJSON{}}
		if p.Applied >= 0 {
			pj.Applied = p.Rules[p.Applied].Name
		}
		for _, r := range p.Rules {
			rj := simRuleJSON{Name: r.Name, Mode: string(r.Mode), Algorithm: r.Algorithm, Action: r.Action, Applies: r.Applies, Why: r.Why, Global: r.Global,
				Overridden: r.Overridden, ChargedLater: r.ChargedLater, Spared: r.Spared, Blocked: r.Blocked}
			if r.Applies && r.Action == policy.ActionLimit {
				level := r.Level
				rj.Identity, rj.Cost, rj.StateKnown, rj.Level = r.Identity, r.Cost, r.Known, &level
				d := r.Decision
				rj.Decision = &simRuleDecis{Allowed: d.Allowed, Remaining: d.Remaining, Wait: d.Wait, Reset: d.Reset, Delay: d.Delay}
				if c := r.Response; c != nil {
					rj.Response = &simChargeJSON{Charged: c.Charged, Cost: c.Cost, Why: c.Why, Remaining: c.After}
				}
			}
			pj.Rules = append(pj.Rules, rj)
		}
		out.Policies = append(out.Policies, pj)
	}
	return out
}

type simulateBody struct {
	Request *simulate.RequestSpec `json:"request"`
	Policy  json.RawMessage       `json:"policy"`
	Version *int64                `json:"version"`
}

func (s *server) apiSimulate(w http.ResponseWriter, r *http.Request) error {
	var b simulateBody
	if err := s.decodeJSON(w, r, &b, []string{"request", "policy", "version"}); err != nil {
		return err
	}
	if b.Request == nil {
		return &policies.InputError{Field: "request", Message: "required: the request to simulate (method, path, host, headers, query, client_address, jwt or claims)"}
	}
	req, err := buildSimRequest(*b.Request)
	if err != nil {
		return err
	}
	sp, err := s.loadSimPolicy(r.Context(), b.Policy, b.Version)
	if err != nil {
		return err
	}
	now := s.now()
	res := simulate.Run(sp.cfg, req, simulate.Options{Now: limiter.Seconds(now.UnixNano()), Lookup: s.telemetryLookup(now)})
	out := simJSON(sp.label, res)
	out.AsTest, _ = policycheck.TestFor(sp.cfg, *b.Request)
	writeJSON(w, http.StatusOK, out)
	return nil
}
