package envoyhost_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// probeScripts drive the probe module (plugin/wasmhost/testdata/probe)
// through ABI calls whose answers the two hosts must agree on: the
// statuses, values and CAS numbers of shared data, header-map semantics,
// properties, metrics, local replies. Each script runs on a fresh host.
var probeScripts = []struct {
	name, probe, probeResp string
	props                  map[string][]byte
	env                    map[string]string
}{
	{name: "shared data CAS", probe: "get k; set k v1 0; get k; set k v2 999; set k v3 1; get k; " +
		"set k v4 0; get k; set fresh x 12345; get fresh; set n 5 0; incr n; get n; set k _ 0; get k"},
	{name: "request headers", probe: "hget :path; hget X-Missing; hadd X-Up A; hadd x-up B; hget X-UP; " +
		"hrep x-up C; hpairs; hdel x-up; hget x-up; hrep x-new N; hget x-new"},
	{name: "request header map bytes and size", probe: "hraw; hsize; hadd X-Rep 1; hadd x-rep 2; hadd x-empty _; hraw; hsize; " +
		"hdel x-rep; hraw"},
	{name: "response header map bytes and size", probeResp: "rraw; rsize; radd x-a 1; radd X-A 2; rraw; rsize"},
	{name: "response headers during the request phase", probe: "rget :status; radd a b; rpairs; rrep a c; rdel a"},
	{name: "response headers", probeResp: "rget :status; radd x-a 1; radd x-a 2; rrep x-a 3; rget x-a; rpairs; rdel x-a; rget x-a"},
	{name: "properties", probe: "prop node.id; prop plugin_name; prop plugin_root_id; prop plugin_vm_id; " +
		"prop1 source.address; prop source.address; propi source.port; prop request.path; prop request.url_path; " +
		"prop request.host; prop request.method; prop request.scheme; prop request.protocol; propi request.time; " +
		"prop request.nope; prop nope; setprop my.value v; prop my.value",
		props: map[string][]byte{"source.address": []byte("10.1.2.3:4567")}},
	{name: "clock, environment and configuration", probe: "now; since; env GOGC; env PROBE; env NOPE; config; vmconfig; root; ctx",
		env: map[string]string{"GOGC": "400", "PROBE": "x y"}},
	{name: "property maps", probe: "propmap request.headers; propmap response.headers; prop response.code",
		probeResp: "propmap response.headers; propi response.code"},
	{name: "metrics", probe: "counter c 0; counter c 2; counter c 0; gauge g 5; gauge g -7; hist h 3"},
	{name: "local reply", probe: "reply 429 x-a=1,content-type=application/json limited; reply 500 _ again"},
	{name: "local reply without body", probe: "reply 403 x-b=2 _"},
	{name: "unsupported calls", probe: "foreign nope x; close"},
}

func TestProbeAnswersAgreeWithWasmhost(t *testing.T) {
	probeWasm := wasmtest.Build(t, "./plugin/wasmhost/testdata/probe")
	probePath := module(t, "./plugin/wasmhost/testdata/probe")
	ctx := context.Background()
	for _, mode := range envoyhost.Modes {
		for _, s := range probeScripts {
			t.Run(string(mode)+"/"+s.name, func(t *testing.T) {
				req := scenario.Request{Headers: []scenario.Header{{":path", "/p?q=1"}}, Properties: s.props}
				if s.probe != "" {
					req.Headers = append(req.Headers, scenario.Header{"x-probe", s.probe})
				}
				if s.probeResp != "" {
					req.Headers = append(req.Headers, scenario.Header{"x-probe-resp", s.probeResp})
				}

				eh, err := envoyhost.Starter(mode)(t, scenario.Options{WasmPath: probePath, Start: t0, Env: s.env})
				if err != nil {
					t.Fatal(err)
				}
				got, err := eh.HTTP(0, req)
				if err != nil {
					t.Fatal(err)
				}

				wh, err := wasmhost.New(ctx, wasmhost.Config{Wasm: probeWasm, Clock: wasmhost.NewManualClock(t0), Env: s.env,
					NodeID: envoyhost.DefaultNodeID, PluginName: envoyhost.DefaultPluginName,
					RootID: envoyhost.DefaultRootID, VMID: envoyhost.DefaultVMID})
				if err != nil {
					t.Fatal(err)
				}
				defer wh.Close(ctx)
				wreq := &wasmhost.Request{Headers: req.Headers, Properties: wasmhost.Properties{}}
				for k, v := range s.props {
					wreq.Properties[k] = v
				}
				want, err := wh.VM(0).HTTP(ctx, wreq)
				if err != nil {
					t.Fatal(err)
				}

				if g, w := summary(got.Rejected, got.Status, got.UpstreamHeaders, got.ResponseHeaders),
					summary(want.Rejected, want.Status, want.UpstreamHeaders, want.ResponseHeaders); g != w {
					t.Errorf("Envoy's host and wasmhost differ:\n envoyhost: %s\n wasmhost:  %s", g, w)
				}
			})
		}
	}
}

func summary(rejected bool, status int, up, resp []scenario.Header) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rejected=%v status=%d upstream=[", rejected, status)
	for _, kv := range up {
		if strings.HasPrefix(kv[0], "x-r") || !strings.HasPrefix(kv[0], "x-probe") {
			fmt.Fprintf(&b, "%s=%q ", kv[0], kv[1])
		}
	}
	b.WriteString("] response=[")
	for _, kv := range resp {
		fmt.Fprintf(&b, "%s=%q ", kv[0], kv[1])
	}
	b.WriteString("]")
	return b.String()
}

// answerText is a filter's answer as the random comparisons compare it.
func answerText(res scenario.Response) string {
	return summary(res.Rejected, res.Status, res.UpstreamHeaders, res.ResponseHeaders) +
		fmt.Sprintf(" paused=%v body=%q details=%q", res.Paused, res.LocalBody, res.LocalDetails)
}

// The lifecycle the probe logs (root and plugin start, configuration,
// on_log results, stream end, retirement of a replaced root context) must be
// the same, in the same order, across a configuration-only update.
func TestLifecycleLogsAgreeWithWasmhost(t *testing.T) {
	probeWasm := wasmtest.Build(t, "./plugin/wasmhost/testdata/probe")
	probePath := module(t, "./plugin/wasmhost/testdata/probe")
	ctx := context.Background()
	req := scenario.Request{Headers: []scenario.Header{{"x-probe-log", "hget :path; rget :status; hadd x y"}}}
	for _, mode := range envoyhost.Modes {
		t.Run(string(mode), func(t *testing.T) {
			eh, err := envoyhost.Starter(mode)(t, scenario.Options{WasmPath: probePath, Config: []byte("log-start first"), Start: t0})
			if err != nil {
				t.Fatal(err)
			}
			wh, err := wasmhost.New(ctx, wasmhost.Config{Wasm: probeWasm, PluginConfig: []byte("log-start first"),
				Clock: wasmhost.NewManualClock(t0), NodeID: envoyhost.DefaultNodeID, PluginName: envoyhost.DefaultPluginName,
				RootID: envoyhost.DefaultRootID, VMID: envoyhost.DefaultVMID})
			if err != nil {
				t.Fatal(err)
			}
			defer wh.Close(ctx)
			steps := []func() error{
				func() error { _, err := eh.HTTP(0, req); return err },
				func() error { return eh.Reconfigure([]byte("log-start second")) },
				func() error { _, err := eh.HTTP(0, req); return err },
			}
			wsteps := []func() error{
				func() error { _, err := wh.VM(0).HTTP(ctx, &wasmhost.Request{Headers: req.Headers}); return err },
				func() error { return wh.Reconfigure(ctx, []byte("log-start second")) },
				func() error { _, err := wh.VM(0).HTTP(ctx, &wasmhost.Request{Headers: req.Headers}); return err },
			}
			for i := range steps {
				if err := steps[i](); err != nil {
					t.Fatalf("envoyhost step %d: %v", i, err)
				}
				if err := wsteps[i](); err != nil {
					t.Fatalf("wasmhost step %d: %v", i, err)
				}
			}
			var wlogs []string
			for _, e := range wh.Logs() {
				wlogs = append(wlogs, e.String())
			}
			if g, w := strings.Join(eh.Logs(), "\n"), strings.Join(wlogs, "\n"); g != w {
				t.Errorf("logs differ\nenvoyhost:\n%s\nwasmhost:\n%s", g, w)
			}
		})
	}
}

// probeSide is one host under a step-by-step comparison.
type probeSide interface {
	http(r scenario.Request) (summary string, paused func() (string, error), err error)
	advance(d time.Duration)
	tick() error
	answer(i int, status, body string) error // "" status: the call fails
	logs() []string
}

type envoySide struct{ h scenario.Host }

func (s envoySide) http(r scenario.Request) (string, func() (string, error), error) {
	res, err := s.h.HTTP(0, r)
	if err != nil || !res.Paused {
		return summary(res.Rejected, res.Status, res.UpstreamHeaders, res.ResponseHeaders), nil, err
	}
	return "paused", func() (string, error) {
		if !res.Stream.Settled() {
			return "not settled", nil
		}
		done, err := res.Stream.Complete()
		return summary(done.Rejected, done.Status, done.UpstreamHeaders, done.ResponseHeaders), err
	}, nil
}
func (s envoySide) advance(d time.Duration) { s.h.Advance(d) }
func (s envoySide) tick() error             { return s.h.Tick() }
func (s envoySide) logs() []string          { return s.h.Logs() }
func (s envoySide) answer(i int, status, body string) error {
	calls, err := s.h.PendingCalls()
	if err != nil || i >= len(calls) {
		return fmt.Errorf("no call %d (%d pending, %v)", i, len(calls), err)
	}
	if status == "" {
		return s.h.FailCall(calls[i].ID)
	}
	return s.h.Respond(calls[i].ID, []scenario.Header{{":status", status}}, []byte(body))
}

type wasmSide struct {
	h     *wasmhost.Host
	clock *wasmhost.ManualClock
}

func (s wasmSide) http(r scenario.Request) (string, func() (string, error), error) {
	ctx := context.Background()
	req := &wasmhost.Request{Headers: r.Headers, Properties: wasmhost.Properties{}}
	res, err := s.h.VM(0).HTTP(ctx, req)
	if err != nil || !res.Paused {
		if err != nil {
			return "", nil, err
		}
		return summary(res.Rejected, res.Status, res.UpstreamHeaders, res.ResponseHeaders), nil, nil
	}
	return "paused", func() (string, error) {
		select {
		case <-res.Stream.Settled():
		default:
			return "not settled", nil
		}
		done, err := res.Stream.Complete(ctx, []wasmhost.Header{{":status", "200"}})
		if err != nil {
			return "", err
		}
		return summary(done.Rejected, done.Status, done.UpstreamHeaders, done.ResponseHeaders), nil
	}, nil
}
func (s wasmSide) advance(d time.Duration) { s.clock.Advance(d) }
func (s wasmSide) tick() error             { return s.h.Tick(context.Background()) }
func (s wasmSide) logs() []string {
	var out []string
	for _, e := range s.h.Logs() {
		out = append(out, e.String())
	}
	return out
}
func (s wasmSide) answer(i int, status, body string) error {
	calls := s.h.PendingCalls()
	if i >= len(calls) {
		return fmt.Errorf("no call %d (%d pending)", i, len(calls))
	}
	var err error
	if status == "" {
		err = calls[i].Fail()
	} else {
		err = calls[i].Respond([]wasmhost.Header{{":status", status}}, []byte(body))
	}
	if err == nil {
		err = calls[i].Wait(context.Background())
	}
	return err
}

// probeStep is one step: a request (probe script), clock, tick, a call's
// answer, or finishing the paused request of an earlier step.
type probeStep struct {
	probe            string
	advance          time.Duration
	tick             bool
	answer           int // call index to answer, with status ("" fails it)
	status, body     string
	answerIt, finish bool
}

var probeSequences = []struct {
	name  string
	steps []probeStep
}{
	{"tick period", []probeStep{{probe: "tick-period 100; ticks"}, {advance: 99 * time.Millisecond, tick: true},
		{probe: "ticks"}, {advance: time.Millisecond, tick: true}, {probe: "ticks"}, {advance: 250 * time.Millisecond, tick: true},
		{probe: "ticks"}, {tick: true}, {probe: "ticks; tick-period 0"}, {advance: time.Second, tick: true}, {probe: "ticks"}}},
	{"paused then resumed on tick", []probeStep{{probe: "tick-period 10"}, {probe: "pause; resume-on-tick"}, {finish: true},
		{advance: 10 * time.Millisecond, tick: true}, {finish: true}}},
	{"paused then answered on tick", []probeStep{{probe: "tick-period 10"}, {probe: "pause; reply-on-tick 503"},
		{advance: 10 * time.Millisecond, tick: true}, {finish: true}}},
	{"paused and resumed in the same callback", []probeStep{{probe: "pause; resume-now"}}},
	{"shared queue", []probeStep{{probe: "register q1; resolve sluice q1; resolve other q1; resolve sluice nope; " +
		"enqueue 1 hello; dequeue 1; enqueue 1 a; enqueue 1 b; enqueue 99 x"}, {probe: "queued; dequeue 1"}}},
	{"http call answered", []probeStep{{probe: "call upstream-a :method=GET,:path=/x,:authority=a _ body; pause"},
		{answerIt: true, status: "200", body: "pong"}, {finish: true}}},
	{"http call answered 403 replies", []probeStep{{probe: "call upstream-a :method=GET,:path=/x,:authority=a; pause"},
		{answerIt: true, status: "403"}, {finish: true}}},
	{"http call failed", []probeStep{{probe: "call upstream-a :method=GET,:path=/x,:authority=a; pause"},
		{answerIt: true}, {finish: true}}},
	{"http call timed out", []probeStep{{probe: "call upstream-a :method=GET,:path=/x,:authority=a 100; pause"},
		{advance: 100 * time.Millisecond, tick: true}, {finish: true}}},
	// A timeout due before a tick is delivered before it, one due after it
	// after it, however far the clock jumped (x-call-ticks).
	{"http call timeouts and ticks in the order they fell due", []probeStep{{probe: "tick-period 100"},
		{probe: "call upstream-a :method=GET,:path=/x,:authority=a 30; pause"},
		{advance: 150 * time.Millisecond, tick: true}, {finish: true},
		{probe: "call upstream-a :method=GET,:path=/x,:authority=a 200; pause"},
		{advance: 250 * time.Millisecond, tick: true}, {finish: true}}},
	{"http call refused", []probeStep{{probe: "call upstream-a :method=GET,:path=/x; call _ :method=GET,:path=/,:authority=a; " +
		"call nope :method=GET,:path=/,:authority=a"}}},
}

func TestProbeSequencesAgreeWithWasmhost(t *testing.T) {
	probeWasm := wasmtest.Build(t, "./plugin/wasmhost/testdata/probe")
	probePath := module(t, "./plugin/wasmhost/testdata/probe")
	clusters := []string{"upstream-a"}
	for _, mode := range envoyhost.Modes {
		for _, seq := range probeSequences {
			t.Run(string(mode)+"/"+seq.name, func(t *testing.T) {
				eh, err := envoyhost.Starter(mode)(t, scenario.Options{WasmPath: probePath, Start: t0, Clusters: clusters})
				if err != nil {
					t.Fatal(err)
				}
				clock := wasmhost.NewManualClock(t0)
				wh, err := wasmhost.New(context.Background(), wasmhost.Config{Wasm: probeWasm, Clock: clock, Clusters: clusters,
					NodeID: envoyhost.DefaultNodeID, PluginName: envoyhost.DefaultPluginName,
					RootID: envoyhost.DefaultRootID, VMID: envoyhost.DefaultVMID})
				if err != nil {
					t.Fatal(err)
				}
				defer wh.Close(context.Background())
				sides := []probeSide{envoySide{eh}, wasmSide{wh, clock}}
				var trace [2][]string
				var paused [2]func() (string, error)
				for i, st := range seq.steps {
					for k, s := range sides {
						var out string
						var err error
						switch {
						case st.probe != "":
							var p func() (string, error)
							out, p, err = s.http(scenario.Request{Headers: []scenario.Header{{"x-probe", st.probe}}})
							if p != nil {
								paused[k] = p
							}
						case st.finish:
							if paused[k] == nil {
								t.Fatalf("step %d: nothing paused", i)
							}
							out, err = paused[k]()
							if out != "not settled" {
								paused[k] = nil
							}
						case st.answerIt:
							err = s.answer(st.answer, st.status, st.body)
						default:
							s.advance(st.advance)
							if st.tick {
								err = s.tick()
							}
						}
						if err != nil {
							out = "error"
						}
						trace[k] = append(trace[k], fmt.Sprintf("step %d: %s", i, out))
					}
				}
				trace[0] = append(trace[0], sides[0].logs()...)
				trace[1] = append(trace[1], sides[1].logs()...)
				if g, w := strings.Join(trace[0], "\n"), strings.Join(trace[1], "\n"); g != w {
					t.Errorf("Envoy's host and wasmhost differ\nenvoyhost:\n%s\nwasmhost:\n%s", g, w)
				}
			})
		}
	}
}
