package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policycheck"
	"github.com/sluice-rl/sluice/shared/simulate"
	"github.com/sluice-rl/sluice/web"
)

// simulateSubmit is POST /simulate: the policy page's form (the draft and
// the simulator's fields) simulated, the page shown again with the draft
// kept and the outcome below it.
func (s *server) simulateSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	f := r.PostForm
	p, _, err := s.submittedDraft(r, sess)
	if err != nil {
		return err
	}
	draft := p.Draft
	p.Sim = simFormOf(f)
	if base, err := parseVersion(f.Get("base_version"), "base_version"); err == nil {
		p.BaseVersion = base
	}
	view, status := s.simulateForm(r, p.Sim, []byte(draft))
	if len(view.problems) > 0 {
		p.Problems, p.Listing = annotate([]byte(draft), view.problems)
	}
	p.SimResult = &view.SimView
	s.render(w, r, status, web.Editor(p))
	return nil
}

// simFormOf reads the simulator's fields of the policy page's form.
func simFormOf(f url.Values) web.SimForm {
	return web.SimForm{
		Against: f.Get("sim_against"), Version: strings.TrimSpace(f.Get("sim_version")), Method: f.Get("sim_method"),
		Path: f.Get("sim_path"), Host: f.Get("sim_host"), Headers: f.Get("sim_headers"), Client: f.Get("sim_client"),
		Peer: f.Get("sim_peer"), Route: f.Get("sim_route"), Cluster: f.Get("sim_cluster"), Connection: f.Get("sim_connection"), Metadata: f.Get("sim_metadata"), JWT: f.Get("sim_jwt"),
		RespStatus: strings.TrimSpace(f.Get("sim_resp_status")), RespHeaders: f.Get("sim_resp_headers"),
		RespTrailers: f.Get("sim_resp_trailers"), RespBody: f.Get("sim_resp_body"),
	}
}

// headerLines reads "name: value" lines (blank lines skipped).
func headerLines(field, text string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, &policies.InputError{Field: field, Message: fmt.Sprintf("line %d is not \"name: value\"", i+1)}
		}
		out[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	return out, nil
}

// sampleResponse is the form's sample response, or nil when its fields
// are empty.
func sampleResponse(f web.SimForm) (*simulate.ResponseSpec, error) {
	if f.RespStatus == "" && strings.TrimSpace(f.RespHeaders+f.RespTrailers+f.RespBody) == "" {
		return nil, nil
	}
	resp := &simulate.ResponseSpec{Body: f.RespBody}
	if f.RespStatus != "" {
		n, err := strconv.Atoi(f.RespStatus)
		if err != nil {
			return nil, &policies.InputError{Field: "request.response.status", Message: fmt.Sprintf("%q is not an HTTP status", f.RespStatus)}
		}
		resp.Status = n
	}
	var err error
	if resp.Headers, err = headerLines("request.response.headers", f.RespHeaders); err != nil {
		return nil, err
	}
	if resp.Trailers, err = headerLines("request.response.trailers", f.RespTrailers); err != nil {
		return nil, err
	}
	return resp, nil
}

type simFormResult struct {
	web.SimView
	problems policy.Errors // the draft is invalid
}

func (s *server) simulateForm(r *http.Request, f web.SimForm, draft []byte) (simFormResult, int) {
	fail := func(field, msg string) (simFormResult, int) {
		return simFormResult{SimView: web.SimView{Field: field, Error: msg}}, http.StatusBadRequest
	}
	req := simulate.RequestSpec{Method: f.Method, Path: f.Path, Host: f.Host, ClientAddress: f.Client, PeerPrincipal: f.Peer, Route: f.Route, Cluster: f.Cluster,
		Connection: simulate.ConnectionSpec(f.Connection)}
	if m := strings.TrimSpace(f.Metadata); m != "" {
		req.Metadata = json.RawMessage(m)
	}
	var ie *policies.InputError
	headers, err := headerLines("request.headers", f.Headers)
	if err == nil {
		req.Headers = headers
		req.Response, err = sampleResponse(f)
	}
	if errors.As(err, &ie) {
		return fail(ie.Field, ie.Message)
	}
	if jwt := strings.TrimSpace(f.JWT); strings.HasPrefix(jwt, "{") {
		req.Claims = json.RawMessage(jwt)
	} else {
		req.JWT = jwt
	}
	sreq, err := buildSimRequest(req)
	if errors.As(err, &ie) {
		return fail(ie.Field, ie.Message)
	} else if err != nil {
		return fail("", err.Error())
	}
	var version *int64
	switch f.Against {
	case "current":
		draft = nil
	case "version":
		n, err := strconv.ParseInt(f.Version, 10, 64)
		if err != nil || n < 0 {
			return fail("version", fmt.Sprintf("%q is not a version number", f.Version))
		}
		draft, version = nil, &n
	default:
		if strings.TrimSpace(string(draft)) == "" {
			return fail("policy", "the draft is empty")
		}
	}
	sp, err := s.loadSimPolicy(r.Context(), draft, version)
	var ve *policies.ValidationError
	var nfe *policies.NotFoundError
	switch {
	case errors.As(err, &ve):
		out, _ := fail("policy", "the policy is invalid; the filter would refuse it (see the problems above)")
		if version == nil && draft != nil {
			out.problems = ve.Errors
		}
		return out, http.StatusUnprocessableEntity
	case errors.As(err, &nfe):
		out, _ := fail("version", nfe.Error())
		return out, http.StatusNotFound
	case errors.As(err, &ie):
		return fail(ie.Field, ie.Message)
	case err != nil:
		s.log.Error("simulation failed", "err", err)
		out, _ := fail("", "internal error; see the admin's log")
		return out, http.StatusInternalServerError
	}
	now := s.now()
	res := simulate.Run(sp.cfg, sreq, simulate.Options{Now: limiter.Seconds(now.UnixNano()), Lookup: s.telemetryLookup(now)})
	v := simView(sp.label, res)
	v.AsTest, _ = policycheck.TestFor(sp.cfg, req) // the request was built above: it builds again
	return simFormResult{SimView: v}, http.StatusOK
}

// simView renders a simulation's outcome for people.
func simView(label string, res simulate.Result) web.SimView {
	v := web.SimView{Policy: label, Allowed: res.Status == 0, Status: res.Status, GRPCStatus: policy.GRPCCodeName(res.GRPCStatus), Rule: res.Rule,
		Headers: res.Headers, Upstream: res.Upstream, Body: res.Body, Details: res.Details, DelayMS: res.DelayMS}
	for _, p := range res.Policies {
		pv := web.SimPolicyView{Name: p.Name}
		for _, r := range p.Rules {
			rv := web.SimRuleView{Name: r.Name, Applies: r.Applies, Why: r.Why, Mode: string(r.Mode), Identity: r.Identity}
			if r.Applies {
				unit := "tokens"
				switch r.Algorithm {
				case policy.AlgorithmTokenBucket:
				case policy.AlgorithmConcurrency:
					unit = "places free"
				default:
					unit = "left in the window"
				}
				rv.Cost = num(r.Cost)
				if r.Known {
					rv.State = num(r.Level) + " " + unit + " (from telemetry)"
				} else {
					rv.State = num(r.Level) + " " + unit + " (new: telemetry has not reported it)"
				}
				d := r.Decision
				switch {
				case d.Allowed && d.Delay > 0:
					rv.Decision = fmt.Sprintf("allowed after %s s, %s left", num(d.Delay), num(d.Remaining))
				case d.Allowed:
					rv.Decision = "allowed, " + num(d.Remaining) + " left"
				case r.Mode == policy.ModeShadow:
					rv.Decision, rv.Rejects = "would reject (shadow: let through), retry in "+num(d.Wait)+" s", true
				case r.Spared:
					rv.Decision, rv.Rejects = "would reject, but the rule is not enforced on this identity yet (enforce_percent): let through, retry in "+num(d.Wait)+" s", true
				default:
					rv.Decision, rv.Rejects = "rejects, retry in "+num(d.Wait)+" s", true
				}
				if r.Global {
					rv.Decision += " (global rule: decided as one local bucket of its limit)"
				}
				if r.Blocked {
					rv.Decision += "; the identity is blocked (block_seconds), so the wait covers the block"
				}
				if c := r.Response; c != nil && c.Charged {
					rv.Response = "charged " + num(c.Cost) + " (" + c.Why + "), leaving " + num(c.After)
				} else if c != nil {
					rv.Response = "charged nothing (" + c.Why + ")"
				} else if r.ChargedLater && d.Allowed {
					rv.Response = "charged when it arrives: give a sample response to see what"
				}
			}
			pv.Rules = append(pv.Rules, rv)
		}
		v.Policies = append(v.Policies, pv)
	}
	return v
}
