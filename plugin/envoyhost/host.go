// Package envoyhost runs the filter in Envoy's own wasm host: the library
// Envoy embeds to run proxy-wasm modules (proxy-wasm-cpp-host), with the WAMR
// runtime, built from pinned sources by `make envoyhost` (build.sh) into a
// small C++ program (cpphost/main.cc). The program provides what Envoy
// provides around the library (header maps, local replies, properties,
// metrics, timers, HTTP callouts, a clock the test moves); loading the
// module, the ABI, shared data, shared queues and WASI are the library's own
// code. A Host starts the program as a child process and drives it over
// stdin/stdout; it implements scenario.Host, so the filter's scenarios run
// here exactly as under plugin/wasmhost.
//
// Each VM runs on its own thread of the program, and VMs share the library's
// process-wide shared data, so calls on different VMs (from different
// goroutines) race on it as Envoy's worker threads do.
//
// Under FastJIT, WAMR's JIT code cache is one per process (128 MB in this
// build): it holds about 12 VMs of the filter; a host with more fails to
// start with "fast jit compilation failed: allocate memory failed".
package envoyhost

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// Mode is the WAMR execution mode of the host program.
type Mode string

const (
	// FastJIT is WAMR's fast JIT (asmjit backend).
	FastJIT Mode = "jit"
	// FastInterp is WAMR's fast interpreter (Envoy's default WAMR build).
	FastInterp Mode = "interp"
)

// Modes lists every mode, for tests that run under each.
var Modes = []Mode{FastJIT, FastInterp}

func (m Mode) String() string {
	switch m {
	case FastJIT:
		return "WAMR fast JIT"
	case FastInterp:
		return "WAMR fast interpreter"
	}
	return "WAMR mode " + string(m)
}

// Defaults of the properties Options does not set.
const (
	DefaultNodeID     = "envoyhost"
	DefaultPluginName = "sluice-ratelimit"
	DefaultRootID     = "sluice"
	DefaultVMID       = "sluice"
)

// Dir returns the directory the host programs are built into:
// $SLUICE_ENVOYHOST_DIR, else .cache/envoyhost under the module root.
func Dir() (string, error) {
	if d := os.Getenv("SLUICE_ENVOYHOST_DIR"); d != "" {
		return d, nil
	}
	root, err := wasmtest.Root()
	if err != nil {
		return "", fmt.Errorf("envoyhost: %v; or set SLUICE_ENVOYHOST_DIR", err)
	}
	return filepath.Join(root, ".cache", "envoyhost"), nil
}

// Binary returns the path of the host program for mode, or an error that
// says how to build it (and which tool or variable is missing to do so).
func Binary(mode Mode) (string, error) {
	if mode != FastJIT && mode != FastInterp {
		return "", fmt.Errorf("envoyhost: unknown mode %q (use envoyhost.FastJIT or envoyhost.FastInterp)", string(mode))
	}
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sluice-envoyhost-"+string(mode))
	if st, err := os.Stat(bin); err == nil && !st.IsDir() {
		return bin, nil
	}
	return "", errors.New(missingMessage(bin))
}

func missingMessage(bin string) string {
	msg := fmt.Sprintf("Envoy's wasm host is not built (%s is missing): run `make envoyhost`", bin)
	var missing []string
	for _, t := range []struct{ cmd, pkg string }{{"g++", "g++"}, {"cmake", "cmake"}, {"ninja", "ninja-build"}} {
		if _, err := exec.LookPath(t.cmd); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", t.cmd, t.pkg))
		}
	}
	if _, err := os.Stat("/usr/include/openssl/sha.h"); err != nil {
		missing = append(missing, "the OpenSSL headers (Debian package libssl-dev)")
	}
	if len(missing) > 0 {
		msg += "; it needs " + strings.Join(missing, ", ") + ", not installed here (apt-get install g++ cmake ninja-build libssl-dev)"
	}
	if os.Getenv("SLUICE_THIRD_PARTY") == "" {
		msg += "; SLUICE_THIRD_PARTY is not set, so the build downloads the pinned sources from GitHub: " +
			"without network, set it to the directory of pinned archives (../shared/third_party)"
	}
	return msg + ". A developer without the tools may skip these tests with SLUICE_SKIP_ENVOYHOST=1 (ignored when CI is set)."
}

// Require returns the host program for mode. When it is missing it fails tb
// with instructions, or skips tb if SLUICE_SKIP_ENVOYHOST=1 and CI is unset.
func Require(tb testing.TB, mode Mode) string {
	tb.Helper()
	bin, err := Binary(mode)
	if err == nil {
		return bin
	}
	if os.Getenv("SLUICE_SKIP_ENVOYHOST") == "1" && os.Getenv("CI") == "" {
		tb.Skipf("SLUICE_SKIP_ENVOYHOST=1: %v", err)
	}
	tb.Fatal(err)
	return ""
}

// Starter returns a scenario.Starter that starts hosts in mode; they are
// closed when the test ends.
func Starter(mode Mode) scenario.Starter {
	return func(tb testing.TB, opts scenario.Options) (scenario.Host, error) {
		tb.Helper()
		bin := Require(tb, mode)
		if opts.WasmPath == "" {
			opts.WasmPath = scenario.PluginWasmPath(tb)
		}
		h, err := start(bin, mode, opts)
		if err != nil {
			return nil, err
		}
		tb.Cleanup(func() { _ = h.Close() })
		return h, nil
	}
}

// Start starts a host in mode outside a test (benchmarks, tools).
func Start(mode Mode, opts scenario.Options) (*Host, error) {
	bin, err := Binary(mode)
	if err != nil {
		return nil, err
	}
	return start(bin, mode, opts)
}

// Host is one host program: Options.VMs VMs of one module sharing one
// shared-data store. It implements scenario.Host.
type Host struct {
	c    *client
	mode Mode
	vms  int
}

var _ scenario.Host = (*Host)(nil)

func start(bin string, mode Mode, opts scenario.Options) (*Host, error) {
	if opts.VMs == 0 {
		opts.VMs = 1
	}
	if opts.NodeID == "" {
		opts.NodeID = DefaultNodeID
	}
	if opts.Start.IsZero() {
		opts.Start = scenario.DefaultStart
	}
	wasm, err := filepath.Abs(opts.WasmPath)
	if err != nil {
		return nil, err
	}
	label := "envoyhost (" + mode.String() + ")"
	c, err := startClient(bin, label)
	if err != nil {
		return nil, err
	}
	var l line
	l.str(wasm)
	l.str(string(opts.Config))
	l.num(int64(opts.VMs))
	l.num(opts.Start.UnixNano())
	l.str(opts.NodeID)
	l.str(DefaultPluginName)
	l.str(DefaultRootID)
	l.str(DefaultVMID)
	env := make([]scenario.Header, 0, len(opts.Env))
	for k, v := range opts.Env {
		env = append(env, scenario.Header{k, v})
	}
	sort.Slice(env, func(i, j int) bool { return env[i][0] < env[j][0] })
	l.headers(env)
	if opts.Clusters == nil {
		l.num(-1)
	} else {
		l.num(int64(len(opts.Clusters)))
		for _, cl := range opts.Clusters {
			l.str(cl)
		}
	}
	if _, err := c.call("start", l); err != nil {
		c.kill()
		return nil, err
	}
	return &Host{c: c, mode: mode, vms: opts.VMs}, nil
}

// Name names the host and its mode.
func (h *Host) Name() string { return "envoyhost-" + string(h.mode) }

// requestLine encodes a request: headers (pseudo-headers defaulted),
// properties, upstream response headers (default :status 200), response
// trailers, the response body's chunks (a list of tokens, each escaped like
// any string: any bytes), whether the stream is reset after the request or
// holds its upstream, and the number of body chunks after which it is reset
// (0: none).
func requestLine(l *line, r scenario.Request) {
	hs := make([]scenario.Header, 0, len(r.Headers)+4)
	for _, d := range [...]scenario.Header{{":method", "GET"}, {":path", "/"}, {":authority", "localhost"}, {":scheme", "http"}} {
		found := false
		for _, kv := range r.Headers {
			if kv[0] == d[0] {
				found = true
				break
			}
		}
		if !found {
			hs = append(hs, d)
		}
	}
	hs = append(hs, r.Headers...)
	l.headers(hs)
	props := make([]scenario.Header, 0, len(r.Properties))
	for k, v := range r.Properties {
		props = append(props, scenario.Header{k, string(v)})
	}
	sort.Slice(props, func(i, j int) bool { return props[i][0] < props[j][0] })
	l.headers(props)
	resp := r.ResponseHeaders
	if resp == nil {
		resp = []scenario.Header{{":status", "200"}}
	}
	l.headers(resp)
	l.headers(r.ResponseTrailers)
	l.num(int64(len(r.ResponseBody)))
	for _, c := range r.ResponseBody {
		l.str(string(c))
	}
	after := int64(0) // what follows the request: nothing, a reset (1), a held answer (2)
	switch {
	case r.ResetAfterRequest:
		after = 1
	case r.HoldUpstream:
		after = 2
	}
	l.num(after)
	l.num(int64(r.ResetAfterBodyChunks))
}

func (h *Host) checkVM(vm int) error {
	if vm < 0 || vm >= h.vms {
		return fmt.Errorf("%s: no VM %d (the host has %d)", h.c.label, vm, h.vms)
	}
	return nil
}

func (h *Host) sendHTTP(vm int, r scenario.Request) <-chan answer {
	var l line
	l.num(int64(vm))
	requestLine(&l, r)
	return h.c.send("http", l)
}

func (h *Host) response(t *tokens) (scenario.Response, error) {
	var r scenario.Response
	r.Rejected = t.num() == 1
	r.Status = int(t.num())
	open := t.num() // 1: paused; 2: waiting for its upstream (HoldUpstream)
	r.Paused = open == 1
	id := t.num()
	if body := t.str(); body != "" {
		r.LocalBody = []byte(body)
	}
	r.LocalDetails = t.str()
	r.UpstreamHeaders = t.headers()
	r.ResponseHeaders = t.headers()
	if body := t.str(); body != "" {
		r.ResponseBody = []byte(body)
	}
	if t.err != nil {
		return r, t.err
	}
	if open != 0 {
		r.Stream = &stream{h: h, id: id}
	}
	return r, nil
}

// HTTP runs one full stream on VM vm.
func (h *Host) HTTP(vm int, r scenario.Request) (scenario.Response, error) {
	if err := h.checkVM(vm); err != nil {
		return scenario.Response{}, err
	}
	a := <-h.sendHTTP(vm, r)
	if a.err != nil {
		return scenario.Response{}, a.err
	}
	return h.response(&a.tok)
}

// HTTPMany sends every stream at once (the program runs them in order on the
// VM) and collects the answers; it stops at the first error.
func (h *Host) HTTPMany(vm int, rs []scenario.Request) ([]scenario.Response, error) {
	if err := h.checkVM(vm); err != nil {
		return nil, err
	}
	// Batches go out back to back and run on the VM one after another; each
	// is answered in one line (the command httpmany).
	var chs []<-chan answer
	for from := 0; from < len(rs); from += httpBatch {
		batch := rs[from:min(from+httpBatch, len(rs))]
		var l line
		l.num(int64(vm))
		l.num(int64(len(batch)))
		for _, r := range batch {
			requestLine(&l, r)
		}
		chs = append(chs, h.c.send("httpmany", l))
	}
	out := make([]scenario.Response, 0, len(rs))
	var first error
	for _, ch := range chs {
		a := <-ch
		if first != nil {
			continue
		}
		if first = a.err; first != nil {
			continue
		}
		n := a.tok.num()
		for i := int64(0); i < n && first == nil; i++ {
			resp, err := h.response(&a.tok)
			if err != nil {
				first = err
				break
			}
			out = append(out, resp)
		}
		if first == nil {
			first = a.tok.err
		}
	}
	return out, first
}

// httpBatch is the number of streams per httpmany command.
const httpBatch = 1000

// Advance moves both clocks forward by d.
func (h *Host) Advance(d time.Duration) {
	var l line
	l.num(int64(d))
	_, _ = h.c.call("advance", l)
}

// Tick runs proxy_on_tick on every root context whose period has elapsed
// (no catch-up), and times out HTTP calls past their deadline, as
// scenario.Host.Tick orders them.
func (h *Host) Tick() error {
	_, err := h.c.call("tick", nil)
	return err
}

// Reconfigure applies config to every VM as a configuration-only update
// (a new root context per VM: proxy_on_context_create, proxy_on_vm_start,
// proxy_on_configure); if any VM rejects it, none takes it.
func (h *Host) Reconfigure(config []byte) error {
	var l line
	l.str(string(config))
	_, err := h.c.call("reconfigure", l)
	return err
}

// Metric returns a counter or gauge by name.
func (h *Host) Metric(name string) (uint64, bool) {
	var l line
	l.str(name)
	t, err := h.c.call("metric", l)
	if err != nil {
		return 0, false
	}
	found := t.num() == 1
	v := t.num()
	return uint64(v), found && t.err == nil
}

// Logs returns the plugin's log lines ("vm N [level] message"), oldest first.
func (h *Host) Logs() []string {
	t, err := h.c.call("logs", nil)
	if err != nil {
		return []string{err.Error()}
	}
	n := t.num()
	out := make([]string, 0, n)
	for i := int64(0); i < n && t.err == nil; i++ {
		out = append(out, t.str())
	}
	return out
}

// SharedDataSize returns the number of shared-data keys of the vm_id and the
// sum of len(key)+len(value).
func (h *Host) SharedDataSize() (keys, bytes int, err error) {
	t, err := h.c.call("shsize", nil)
	if err != nil {
		return 0, 0, err
	}
	keys, bytes = int(t.num()), int(t.num())
	return keys, bytes, t.err
}

// SharedGet reads one shared-data value.
func (h *Host) SharedGet(key string) ([]byte, bool, error) {
	var l line
	l.str(key)
	t, err := h.c.call("shget", l)
	if err != nil {
		return nil, false, err
	}
	found := t.num() == 1
	v := t.str()
	if !found {
		return nil, false, t.err
	}
	return []byte(v), true, t.err
}

// PendingCalls lists the dispatch_http_call calls not answered yet.
func (h *Host) PendingCalls() ([]scenario.Call, error) {
	t, err := h.c.call("pending", nil)
	if err != nil {
		return nil, err
	}
	n := t.num()
	out := make([]scenario.Call, 0, n)
	for i := int64(0); i < n && t.err == nil; i++ {
		c := scenario.Call{ID: uint32(t.num()), VM: int(t.num()), Cluster: t.str(), Headers: t.headers()}
		if b := t.str(); b != "" {
			c.Body = []byte(b)
		}
		out = append(out, c)
	}
	return out, t.err
}

// Respond answers a pending call; on_http_call_response has run on return.
func (h *Host) Respond(id uint32, headers []scenario.Header, body []byte) error {
	var l line
	l.num(int64(id))
	l.headers(headers)
	l.str(string(body))
	_, err := h.c.call("respond", l)
	return err
}

// FailCall delivers the failure callback of a pending call (no headers, no
// body), as Envoy does when the callout fails.
func (h *Host) FailCall(id uint32) error {
	var l line
	l.num(int64(id))
	_, err := h.c.call("fail", l)
	return err
}

// BenchResult is what Bench measured.
type BenchResult struct {
	Wall     time.Duration // the time the streams took in the host program
	CPU      time.Duration // the VM thread's CPU time meanwhile (not counting other processes' turns); 0 from an older host program
	Rejected int           // streams rejected
}

// Bench runs n full streams of r on VM vm inside the host program and
// returns the time they took there (no pipe round trips) and how many were
// rejected. "{i}" in a header or property value is replaced by the stream's
// number (first, first+1, ... first+n-1), to make distinct identities.
func (h *Host) Bench(vm, first, n int, r scenario.Request) (BenchResult, error) {
	var res BenchResult
	if err := h.checkVM(vm); err != nil {
		return res, err
	}
	var l line
	l.num(int64(vm))
	l.num(int64(first))
	l.num(int64(n))
	requestLine(&l, r)
	t, err := h.c.call("bench", l)
	if err != nil {
		return res, err
	}
	res.Wall, res.Rejected = time.Duration(t.num()), int(t.num())
	if len(t.t) > 0 { // a host program built before it answered the CPU time answers without it
		res.CPU = time.Duration(t.num())
	}
	return res, t.err
}

// Callbacks are the stream callbacks Profile times, in its order.
var Callbacks = []string{"on_context_create", "on_request_headers", "on_response_headers", "on_log", "on_done", "on_delete"}

// StreamProfile is where n streams' time went inside the host program.
type StreamProfile struct {
	// CallbackNS is the total time in each of Callbacks (the library's
	// call into the module, the module's work and its host calls).
	CallbackNS []int64
	// Calls counts the crossings by name: "vm->host <module>.<function>"
	// for each host call the module made, "host->vm <export>" for each call
	// into the module (the callbacks, and malloc for every value a host
	// call returned). Nil unless asked for.
	Calls map[string]int64
}

// Profile runs n streams of r like Bench and times each callback. With
// calls, it runs them again with the library's trace hooks on and counts
// the crossings (those runs are not timed: tracing slows every crossing).
func (h *Host) Profile(vm, first, n int, r scenario.Request, calls bool) (StreamProfile, error) {
	var p StreamProfile
	if err := h.checkVM(vm); err != nil {
		return p, err
	}
	var l line
	l.num(int64(vm))
	l.num(int64(first))
	l.num(int64(n))
	c := int64(0)
	if calls {
		c = 1
	}
	l.num(c)
	requestLine(&l, r)
	t, err := h.c.call("profile", l)
	if err != nil {
		return p, err
	}
	for range Callbacks {
		p.CallbackNS = append(p.CallbackNS, t.num())
	}
	if k := t.num(); k > 0 {
		p.Calls = map[string]int64{}
		for range k {
			name := t.str()
			p.Calls[name] = t.num()
		}
	}
	return p, t.err
}

// Close stops the host program.
func (h *Host) Close() error {
	select {
	case <-h.c.done:
		return nil
	default:
	}
	_, err := h.c.call("close", nil)
	_ = h.c.in.Close()
	select {
	case <-h.c.done:
	case <-time.After(5 * time.Second):
		h.c.kill()
	}
	if err != nil && strings.Contains(err.Error(), "the host program ended") {
		return nil
	}
	return err
}

// stream is a paused request.
type stream struct {
	h  *Host
	id int64
}

func (s *stream) args() line {
	var l line
	l.num(s.id)
	return l
}

// Settled reports whether the plugin resumed or answered the request.
func (s *stream) Settled() bool {
	t, err := s.h.c.call("settled", s.args())
	return err == nil && t.num() == 1
}

// Complete finishes a settled stream.
func (s *stream) Complete() (scenario.Response, error) {
	t, err := s.h.c.call("complete", s.args())
	if err != nil {
		return scenario.Response{}, err
	}
	return s.h.response(t)
}

// Reset ends the stream as a downstream reset does.
func (s *stream) Reset() error {
	_, err := s.h.c.call("reset", s.args())
	return err
}
