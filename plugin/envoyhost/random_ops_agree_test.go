package envoyhost_test

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/shared/rls"
	"github.com/sluice-rl/sluice/shared/telemetry"
)

// opsConfig has what agreeConfig leaves out: windows, delayed admission
// (paused requests resumed from on_tick), requests in flight (streams left
// open until their upstream answers), the legacy headers, telemetry
// reports and fleet rules leasing from a rate limit service, a token
// bucket's and a fixed window's. LIMIT is the fixed window's limit
// (opsConfigWith), which the run changes with configuration-only updates
// that keep every bucket, window and lease.
const opsConfig = `{"legacy_headers": true,
 "telemetry": {"cluster": "sluice_admin", "token": "t0k", "interval_ms": 1000},
 "fleet": {"cluster": "rls", "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 1000, "lease_min": 1, "lease_max": 6,
   "on_backend_down": "local_share"},
 "policies": [
  {"name": "windows", "rules": [
    {"name": "fixed", "max_keys": 4, "limit_keys": ["header:x-api-key"], "match": {"method": "GET"}, "algorithm": "fixed_window",
     "algorithm_config": {"limit": LIMIT, "window_seconds": 2}},
    {"name": "rolling", "max_keys": 4, "limit_keys": ["header:x-api-key"], "match": {"method": "POST"}, "algorithm": "rolling_window",
     "algorithm_config": {"limit": 3, "window_seconds": 3, "period_seconds": 1}},
    {"name": "sliding", "max_keys": 4, "limit_keys": ["header:x-api-key"], "match": {"method": "PUT"}, "algorithm": "sliding_window",
     "algorithm_config": {"limit": 3, "window_seconds": 2}}
  ]},
  {"name": "smooth", "rules": [
    {"name": "delay", "max_keys": 4, "limit_keys": ["header:x-api-key"], "match": {"header:x-api-key": {"present": true}}, "algorithm": "token_bucket",
     "algorithm_config": {"tokens_per_second": 3, "burst": 3, "max_delay_ms": 800}}
  ]},
  {"name": "inflight", "rules": [
    {"name": "inflight", "max_keys": 4, "limit_keys": ["header:x-api-key"], "match": {"header:x-hold": {"present": true}}, "algorithm": "concurrency",
     "algorithm_config": {"limit": 2, "max_request_seconds": 2}}
  ]},
  {"name": "quotas", "rules": [
    {"name": "daily", "max_keys": 4, "limit_keys": ["header:x-api-key"], "match": {"method": "DELETE"}, "algorithm": "quota",
     "algorithm_config": {"limit": 4, "period": "day", "time_zone": "America/New_York"}},
    {"name": "monthly", "max_keys": 4, "limit_keys": ["header:x-api-key"], "match": {"method": "PATCH"}, "algorithm": "quota",
     "algorithm_config": {"limit": 6, "period": "month", "time_zone": "Europe/Berlin"}}
  ]},
  {"name": "fleet", "rules": [
    {"name": "g", "scope": "global", "max_keys": 4, "limit_keys": ["header:x-tenant"], "match": {"method": "GET"}, "algorithm": "token_bucket",
     "algorithm_config": {"tokens_per_second": 5, "burst": 5}},
    {"name": "gw", "scope": "global", "max_keys": 4, "limit_keys": ["header:x-tenant"], "algorithm": "fixed_window",
     "algorithm_config": {"limit": 8, "window_seconds": 4}}
  ]}
 ]}`

func opsConfigWith(limit string) []byte {
	return []byte(strings.Replace(opsConfig, "LIMIT", limit, 1))
}

// opsConfigWithoutFleet is opsConfig without fleet mode: no "fleet"
// section, no global rules.
func opsConfigWithoutFleet(t *testing.T) []byte {
	var cfg map[string]any
	if err := json.Unmarshal(opsConfigWith("5"), &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "fleet")
	cfg["policies"] = slices.DeleteFunc(cfg["policies"].([]any), func(p any) bool {
		return p.(map[string]any)["name"] == "fleet"
	})
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// heldPair is one paused request, as each host holds it.
type heldPair struct {
	n       int // the request's number, for messages
	streams [2]scenario.Stream
}

// opsDriver applies the same operations to two hosts and fails the test at
// the first answer in which they differ.
type opsDriver struct {
	t     *testing.T
	hosts [2]scenario.Host
	rng   *rand.Rand
	held  []heldPair
	seen  map[string]int // kinds of outcome, to check every path was taken
}

func (d *opsDriver) differ(what string, got [2]string) {
	d.t.Helper()
	if got[0] != got[1] {
		d.t.Fatalf("%s: the hosts differ\n%s:\n%s\n%s:\n%s", what, d.hosts[0].Name(), got[0], d.hosts[1].Name(), got[1])
	}
}

func (d *opsDriver) request(n int) {
	pick := func(xs ...string) string { return xs[d.rng.Intn(len(xs))] }
	req := scenario.Request{Headers: []scenario.Header{{":method", pick("GET", "GET", "POST", "POST", "PUT", "DELETE", "PATCH")}}}
	if d.rng.Intn(4) > 0 {
		req.Headers = append(req.Headers, scenario.Header{"x-api-key", pick("k1", "k2", "k3")})
	}
	if d.rng.Intn(3) > 0 {
		req.Headers = append(req.Headers, scenario.Header{"x-tenant", pick("acme", "globex", "initech", "umbrella")})
	}
	if d.rng.Intn(4) == 0 { // the upstream answers later: the stream stays open
		req.Headers = append(req.Headers, scenario.Header{"x-hold", "1"})
		req.HoldUpstream = true
	}
	vm := d.rng.Intn(2)
	var got [2]string
	var held heldPair
	for k, h := range d.hosts {
		res, err := h.HTTP(vm, req)
		if err != nil {
			d.t.Fatalf("request %d on %s: %v", n, h.Name(), err)
		}
		got[k] = answerText(res)
		held.streams[k] = res.Stream
		if k == 0 {
			switch {
			case res.Paused:
				d.seen["paused"]++
			case res.Stream != nil:
				d.seen["held open"]++
			default:
				d.seen[fmt.Sprintf("status %d", res.Status)]++
			}
		}
	}
	d.differ(fmt.Sprintf("request %d on VM %d %q", n, vm, req.Headers), got)
	if held.streams[0] != nil {
		held.n = n
		d.held = append(d.held, held)
	}
}

// settle compares which paused requests the hosts have resumed or
// answered, finishes those and compares how they end.
func (d *opsDriver) settle(what string) {
	kept := d.held[:0]
	for _, p := range d.held {
		settled := [2]string{fmt.Sprint(p.streams[0].Settled()), fmt.Sprint(p.streams[1].Settled())}
		d.differ(fmt.Sprintf("%s: request %d settled", what, p.n), settled)
		if settled[0] == "false" {
			kept = append(kept, p)
			continue
		}
		var got [2]string
		for k, s := range p.streams {
			res, err := s.Complete()
			if err != nil {
				d.t.Fatalf("completing request %d on %s: %v", p.n, d.hosts[k].Name(), err)
			}
			got[k] = answerText(res)
			if k == 0 {
				d.seen[fmt.Sprintf("resumed status %d", res.Status)]++
			}
		}
		d.differ(fmt.Sprintf("%s: request %d resumed", what, p.n), got)
	}
	d.held = kept
}

// resetOne resets a paused request on both hosts, as a client giving up.
func (d *opsDriver) resetOne() {
	if len(d.held) == 0 {
		return
	}
	i := d.rng.Intn(len(d.held))
	for k, s := range d.held[i].streams {
		if err := s.Reset(); err != nil {
			d.t.Fatalf("resetting request %d on %s: %v", d.held[i].n, d.hosts[k].Name(), err)
		}
	}
	d.seen["reset"]++
	d.held = slices.Delete(d.held, i, i+1)
}

// answerCalls compares the calls the hosts have made (to the rate limit
// service, and telemetry reports to the admin) and answers each the same
// way on both: a grant, a refusal, a failed call, or not yet.
func (d *opsDriver) answerCalls(n int) {
	var calls [2][]scenario.Call
	for k, h := range d.hosts {
		cs, err := h.PendingCalls()
		if err != nil {
			d.t.Fatalf("%s: pending calls: %v", h.Name(), err)
		}
		calls[k] = cs
	}
	var got [2]string
	for k, cs := range calls {
		for _, c := range cs {
			got[k] += fmt.Sprintf("vm %d cluster %s headers %q body %s\n", c.VM, c.Cluster, c.Headers, d.callBody(c))
		}
	}
	d.differ(fmt.Sprintf("calls pending at step %d", n), got)
	for i, c := range calls[0] {
		// Mostly grants, so that leases live long enough to go idle and
		// be returned; refusals, failures and answers left for later too.
		answer := [...]string{"grant", "grant", "grant", "grant", "grant", "refuse", "fail", "later"}[d.rng.Intn(8)]
		if answer == "later" {
			continue
		}
		var body []byte
		var headers []scenario.Header
		if c.Cluster == "rls" {
			body, headers = d.rlsAnswer(c, answer == "refuse")
		} else { // the admin's answer to a report: taken, or refused
			headers = []scenario.Header{{":status", map[bool]string{false: "204", true: "503"}[answer == "refuse"]}}
		}
		for k, h := range d.hosts {
			var err error
			if answer == "fail" {
				err = h.FailCall(calls[k][i].ID)
			} else {
				err = h.Respond(calls[k][i].ID, headers, body)
			}
			if err != nil {
				d.t.Fatalf("%s: answering call %d: %v", h.Name(), calls[k][i].ID, err)
			}
		}
		d.seen[c.Cluster+" "+answer]++
	}
}

// callBody is a call's body as compared: a telemetry report decoded, its
// VM's name (random per VM) left out; other calls' bytes in hex.
func (d *opsDriver) callBody(c scenario.Call) string {
	if c.Cluster != "sluice_admin" {
		return fmt.Sprintf("%x", c.Body)
	}
	r, err := telemetry.Decode(c.Body)
	if err != nil {
		d.t.Fatalf("a telemetry report the admin would refuse: %v\n%s", err, c.Body)
	}
	r.VM = ""
	b, err := json.Marshal(r)
	if err != nil {
		d.t.Fatal(err)
	}
	return string(b)
}

// rlsAnswer is a gRPC answer of the rate limit service to call c: a status
// per descriptor, grants or (with refuse, some) refusals, each with the
// time to the window's end.
func (d *opsDriver) rlsAnswer(c scenario.Call, refuse bool) ([]byte, []scenario.Header) {
	msg, err := rls.Unframe(c.Body)
	req := &rlsv3.RateLimitRequest{}
	if err != nil || proto.Unmarshal(msg, req) != nil {
		d.t.Fatalf("the filter's RLS call %x does not decode", c.Body)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.Descriptors {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: uint32(d.rng.Intn(8)),
			DurationUntilReset: durationpb.New(time.Duration(1+d.rng.Intn(4000)) * time.Millisecond)}
		if refuse && d.rng.Intn(3) > 0 {
			st.Code, st.LimitRemaining = rlsv3.RateLimitResponse_OVER_LIMIT, 0
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		d.t.Fatal(err)
	}
	body := append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
	return body, []scenario.Header{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "0"},
		{"x-sluice-fleet-size", fmt.Sprint(1 + d.rng.Intn(3))}}
}

// TestRandomOperationsAgreeWithWasmhost drives both hosts through the same
// random run of requests, clock steps, ticks, resets of paused requests,
// answers and failures of the rate limit service's calls and
// configuration updates, and requires the same outcome of each: answers,
// which paused requests resume and how, the calls made, the counters and
// the shared data's size.
func TestRandomOperationsAgreeWithWasmhost(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 400
	}
	for _, mode := range envoyhost.Modes {
		t.Run(string(mode), func(t *testing.T) {
			// A week before the clocks change in New York; the jumps
			// usually pass Berlin's change (29 March) and April's start.
			start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			opts := scenario.Options{WasmPath: plugin(t), Config: opsConfigWith("5"), Start: start, VMs: 2, NodeID: "node-a"}
			d := &opsDriver{t: t, hosts: startBoth(t, mode, opts), rng: rand.New(rand.NewSource(agreeSeed(t, 2))), seen: map[string]int{}}
			for i := range n {
				op := d.rng.Intn(20)
				switch {
				case op < 11:
					d.request(i)
				case op < 14:
					step := time.Duration(d.rng.Intn(700)) * time.Millisecond
					if d.rng.Intn(30) == 0 { // now and then hours or days: quotas' periods end, DST begins
						step = time.Duration(1+d.rng.Intn(96)) * time.Hour
						d.seen["jumped"]++
					}
					for _, h := range d.hosts {
						h.Advance(step)
					}
				case op < 16:
					for _, h := range d.hosts {
						if err := h.Tick(); err != nil {
							t.Fatalf("%s: tick: %v", h.Name(), err)
						}
					}
					d.settle(fmt.Sprintf("tick at step %d", i))
				case op < 18:
					d.answerCalls(i)
					d.settle(fmt.Sprintf("answers at step %d", i))
				case op < 19:
					d.resetOne()
				default: // another limit; now and then fleet mode off, or a limit the filter refuses
					cfg, what := opsConfigWith(fmt.Sprint(3+d.rng.Intn(4))), "reconfigured"
					switch d.rng.Intn(8) {
					case 0, 1:
						cfg, what = opsConfigWithoutFleet(t), "reconfigured without fleet mode"
					case 2:
						cfg, what = opsConfigWith("0"), "update refused" // a limit must be at least 1
					}
					for _, h := range d.hosts {
						if err := h.Reconfigure(cfg); (err != nil) != (what == "update refused") {
							t.Fatalf("%s: %s: %v", h.Name(), what, err)
						}
					}
					d.seen[what]++
				}
			}
			t.Logf("outcomes %v", d.seen)
			var sizes [2]string
			for k, h := range d.hosts {
				// Only the count. Each host's deployment drew its own hash
				// key, which places identities in groups; so every rule has
				// one group ("max_keys": 4 in opsConfig, four ways, more
				// than a rule's identities), and the count of group keys
				// does not depend on the key: with the default 16,384
				// groups, two identities sharing a group under one host's
				// key (rarely, but once in CI) made one key fewer per rule.
				keys, _, err := h.SharedDataSize()
				if err != nil {
					t.Fatal(err)
				}
				sizes[k] = fmt.Sprintf("%d keys", keys)
			}
			d.differ("shared data", sizes)
			// The same counts in both hosts; each kind of decision taken
			// (a lease refused, and one returned, by either global rule).
			either := map[string]uint64{}
			for _, name := range []string{"sluice.rule.fixed.rejected", "sluice.rule.rolling.rejected", "sluice.rule.sliding.rejected",
				"sluice.rule.daily.rejected", "sluice.rule.monthly.rejected", "sluice.rule.inflight.allowed", "sluice.rule.inflight.rejected",
				"sluice.rule.delay.delayed", "sluice.rule.delay.rejected", "sluice.delay.cancelled",
				"sluice.rule.g.allowed", "sluice.rule.g.rejected", "sluice.rule.gw.allowed", "sluice.rule.gw.rejected",
				"sluice.rule.g.global_granted", "sluice.rule.g.backend_errors", "sluice.rule.g.fallback_local",
				"sluice.rule.gw.global_fetches", "sluice.rule.gw.backend_errors",
				"sluice.telemetry.sent", "sluice.telemetry.dropped", "sluice.telemetry.skipped", "sluice.config_rejected",
				"sluice.rule.g.global_denied", "sluice.rule.gw.global_denied",
				"sluice.rule.g.global_returned", "sluice.rule.gw.global_returned"} {
				e, _ := d.hosts[0].Metric(name)
				w, _ := d.hosts[1].Metric(name)
				if m := name[strings.LastIndex(name, ".")+1:]; m == "global_denied" || m == "global_returned" {
					either[m] += e
				} else if e == 0 {
					t.Errorf("%s: 0; the random run misses a path", name)
				}
				if e != w {
					t.Errorf("%s: %d in %s, %d in %s; want the same", name, e, d.hosts[0].Name(), w, d.hosts[1].Name())
				}
			}
			for _, m := range []string{"global_denied", "global_returned"} {
				if either[m] == 0 {
					t.Errorf("%s: 0 for both global rules; the random run misses a path", m)
				}
			}
			for _, want := range []string{"paused", "held open", "status 200", "status 429", "resumed status 200", "resumed status 429",
				"reset", "jumped", "rls grant", "rls refuse", "rls fail", "sluice_admin grant", "sluice_admin fail", "reconfigured", "reconfigured without fleet mode", "update refused"} {
				if d.seen[want] == 0 {
					t.Errorf("no %q (outcomes %v): the random run misses a path", want, d.seen)
				}
			}
		})
	}
}

// agreeSeed is a random comparison's seed: base, or base plus
// SLUICE_AGREE_SEED, to run the comparison on other random runs.
func agreeSeed(t *testing.T, base int64) int64 {
	v := os.Getenv("SLUICE_AGREE_SEED")
	if v == "" {
		return base
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("SLUICE_AGREE_SEED=%q: want an integer", v)
	}
	return base + n
}
