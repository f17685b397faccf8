package simulate

import (
	"strconv"

	"github.com/sluice-rl/sluice/shared/bodyscan"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
)

// Response is a sample upstream answer.
type Response struct {
	Status   int               // the HTTP status (0: 200)
	Headers  map[string]string // by lower-case name, one value each
	Trailers map[string]string // by lower-case name; none when empty
	Body     []byte            // the whole body (the filter reads it as it passes)
}

// ResponseCharge is what a rule whose cost comes from the response is
// charged for a sample Response, as the filter charges it
// (plugin/filter/charge.go, body.go), and what that leaves.
type ResponseCharge struct {
	// Charged: the response is charged Cost. False for a status a
	// response_status (response_grpc_status) rule does not count.
	Charged bool
	Cost    float64
	// Why says where the cost came from, in words.
	Why string
	// After is the tokens (quota) left after the charge: below zero in
	// debt, down to -max_debt.
	After float64
	// Next is the state the filter stores with the charge (the rule's
	// state before the request when nothing is charged).
	Next State
}

// respond charges the request's sample response to a rule that admitted
// the request and takes its cost from the response.
func (rr *RuleResult) respond(src *sources, r *policy.Rule, st State, tb limiter.TokenBucket, win limiter.Window, now float64) {
	resp := src.req.Response
	if resp == nil || !rr.Decision.Allowed {
		return
	}
	costSrc, fixed, def := request.RuleCost(r)
	c := responseCost(costSrc, fixed, def, resp)
	if c.Charged {
		maxDebt := ruleMaxDebt(r)
		if q, ok := win.(limiter.Quota); ok {
			w := st.Window
			q.Charge(&w, rr.Known, now, c.Cost, maxDebt) // w is now the period's
			c.After = q.Limit - w.Counts[0]
			c.Next = State{Window: w.Stored()}
		} else {
			next, _ := tb.Charge(st.Bucket, rr.Known, now, c.Cost, maxDebt)
			c.After = next.Tokens
			c.Next = State{Bucket: next.Stored()}
		}
	} else {
		c.After = rr.Level
		c.Next = st
	}
	rr.Response = &c
}

// ruleMaxDebt is the rule's max_debt (overrides applied).
func ruleMaxDebt(r *policy.Rule) float64 {
	switch {
	case r.TokenBucket != nil:
		return r.TokenBucket.MaxDebt
	case r.Quota != nil:
		return r.Quota.MaxDebt
	}
	return 0
}

// responseCost is what a response is charged for a cost source, with the
// filter's rules: a reported cost (header, trailer, body) parsed as the
// filter parses it, default_cost when none is usable; fixed_cost for a
// counted status, nothing for another.
func responseCost(cs policy.CostSource, fixed, def float64, resp *Response) ResponseCharge {
	dflt := func(why string) ResponseCharge {
		return ResponseCharge{Charged: true, Cost: def, Why: why + ": default_cost"}
	}
	status := resp.Status
	if status == 0 {
		status = 200
	}
	switch cs.Kind {
	case policy.CostResponseHeader, policy.CostResponseTrailer:
		where, m := "response header ", resp.Headers
		if cs.Kind == policy.CostResponseTrailer {
			where, m = "response trailer ", resp.Trailers
		}
		v, ok := m[cs.Name]
		if !ok {
			return dflt("no " + where + cs.Name)
		}
		cost, ok := limiter.ParseReportedCost(v)
		if !ok {
			return dflt(where + cs.Name + " " + strconv.Quote(v) + " is not a cost")
		}
		return ResponseCharge{Charged: true, Cost: cost, Why: where + cs.Name}
	case policy.CostResponseJSON:
		return bodyCost(cs.Name, resp, dflt)
	case policy.CostResponseBytes:
		n := len(resp.Body)
		if n == 0 {
			return ResponseCharge{Why: "no response body: nothing to charge"}
		}
		return ResponseCharge{Charged: true, Cost: float64(n), Why: "response body of " + strconv.Itoa(n) + " bytes"}
	case policy.CostResponseStatus:
		if cs.Statuses.Has(status) {
			return ResponseCharge{Charged: true, Cost: fixed, Why: "status " + strconv.Itoa(status) + " is counted"}
		}
		return ResponseCharge{Why: "status " + strconv.Itoa(status) + " is not counted"}
	case policy.CostResponseGRPCStatus:
		v, ok := resp.Trailers["grpc-status"]
		if !ok {
			v, ok = resp.Headers["grpc-status"] // a trailers-only response
		}
		code := policy.ParseGRPCStatus(v)
		if !ok || !cs.GRPCCodes.Has(code) {
			return ResponseCharge{Why: "gRPC status " + strconv.Quote(v) + " is not counted"}
		}
		return ResponseCharge{Charged: true, Cost: fixed, Why: "gRPC status " + policy.GRPCCodeName(code) + " is counted"}
	}
	return ResponseCharge{}
}

// bodyCost reads the cost at paths of the body with the filter's scanner.
func bodyCost(paths string, resp *Response, dflt func(string) ResponseCharge) ResponseCharge {
	if enc := resp.Headers["content-encoding"]; !bodyscan.Readable(enc) {
		return dflt("the body is " + enc + "-encoded and cannot be read")
	}
	if len(resp.Body) == 0 {
		return dflt("no body")
	}
	ps, _ := bodyscan.ParsePaths(paths)
	var s bodyscan.Scanner
	s.Reset(ps, bodyscan.FormatOf(resp.Headers["content-type"]))
	s.Write(resp.Body)
	s.Close()
	cost, outcome := s.Result()
	switch outcome {
	case bodyscan.Found:
		return ResponseCharge{Charged: true, Cost: min(cost, limiter.MaxCost), Why: "response body " + paths}
	case bodyscan.Invalid:
		return dflt("response body " + paths + " holds something that is not a cost")
	}
	return dflt("the response body has no " + paths)
}
