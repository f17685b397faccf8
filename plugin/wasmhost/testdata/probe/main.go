// Command probe is a proxy-wasm test plugin that drives host calls from
// request headers, so that host tests exercise the real ABI through a real
// Go guest.
//
// The request header x-probe holds commands separated by ";", each a name and
// space-separated arguments. They run in on_request_headers; the result of
// command i is added to the request headers as x-r<i> (so it shows in the
// upstream headers, or in the local reply's request headers). x-probe-resp
// commands run in on_response_headers (results added to the response headers
// as x-rr<i>), x-probe-log commands in on_log (results logged at info level
// as "log-results: r0|r1|..."). With the request header x-probe-body, its
// commands run in every on_response_body (results logged at info level as
// "body-results: chunk=<n> size=<body_buffer_length> eos=<end_of_stream>:
// r0|r1|...", n counting from 1) and on_response_trailers logs
// "trailers: n=<number of trailers>"; the body commands are body [start
// [size]] (the chunk through the SDK, hex; default start 0 and the whole
// chunk), bodyraw start size (proxy_get_buffer_bytes as is: status, size,
// hex), bodystatus (proxy_get_buffer_status: status, length, flags),
// bodyset <bytes> (replace the body), bodypause (return Pause from this
// on_response_body), and any other command.
//
// Results are "ok", "ok:<detail>", a plain value, or "err:<Status>" where
// Status is NotFound, BadArgument, CasMismatch, Empty, InternalFailure,
// Unimplemented or the SDK's message.
//
// Plugin configuration: space-separated tokens: "reject" (on_configure
// returns false), "trap-start" (panic in on_configure), "tick=<ms>" (set a
// tick period), "done-later" (on_done returns false; the root finishes with
// proxy_done on its next tick), "trap-tick" (panic in on_tick), "log-start"
// (log the configuration at warn level). VM configuration "vm-reject" makes
// on_vm_start return false.
package main

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func init() { proxywasm.SetVMContext(&vmContext{}) }

func main() {}

type vmContext struct {
	types.DefaultVMContext
	config string
}

func (v *vmContext) OnVMStart(int) types.OnVMStartStatus {
	b, _ := proxywasm.GetVMConfiguration()
	v.config = string(b)
	proxywasm.LogInfof("vm_start config=%q", v.config)
	return types.OnVMStartStatus(!strings.Contains(v.config, "vm-reject"))
}

func (v *vmContext) NewPluginContext(id uint32) types.PluginContext {
	proxywasm.LogDebugf("root_create %d", id)
	return &rootContext{id: id, vm: v, replyOnTick: map[uint32]uint32{}}
}

type rootContext struct {
	types.DefaultPluginContext
	id           uint32
	vm           *vmContext
	config       string
	tokens       map[string]string
	start        time.Time
	ticks        int
	resumeOnTick []uint32
	replyOnTick  map[uint32]uint32
	queued       []string
	counters     map[string]proxywasm.MetricCounter
	gauges       map[string]proxywasm.MetricGauge
	hists        map[string]proxywasm.MetricHistogram
	finishing    bool
}

func (r *rootContext) OnPluginStart(int) types.OnPluginStartStatus {
	b, _ := proxywasm.GetPluginConfiguration() // empty config: NotFound
	r.config = string(b)
	r.start = time.Now()
	r.tokens = map[string]string{}
	for _, t := range strings.Fields(r.config) {
		k, v, _ := strings.Cut(t, "=")
		r.tokens[k] = v
	}
	proxywasm.LogInfof("plugin_start root=%d config=%q", r.id, r.config)
	if _, ok := r.tokens["log-start"]; ok {
		proxywasm.LogWarnf("configured root=%d config=%q", r.id, r.config)
	}
	if _, ok := r.tokens["reject"]; ok {
		proxywasm.LogErrorf("rejecting configuration %q", r.config)
		return types.OnPluginStartStatusFailed
	}
	if _, ok := r.tokens["trap-start"]; ok {
		panic("probe trap in on_configure")
	}
	if ms, ok := r.tokens["tick"]; ok {
		n, _ := strconv.Atoi(ms)
		if err := proxywasm.SetTickPeriodMilliSeconds(uint32(n)); err != nil {
			proxywasm.LogErrorf("set tick period: %v", err)
		}
	}
	return types.OnPluginStartStatusOK
}

// replyOnDone holds the streams (of any root context) that the next root
// context to get on_done answers, with their status ("reply-on-done").
var replyOnDone = map[uint32]uint32{}

func (r *rootContext) OnPluginDone() bool {
	_, later := r.tokens["done-later"]
	proxywasm.LogInfof("plugin_done root=%d later=%v", r.id, later)
	for id, status := range replyOnDone {
		if err := proxywasm.SetEffectiveContext(id); err != nil {
			proxywasm.LogWarnf("done: set effective context %d: %v", id, err)
			continue
		}
		if err := proxywasm.SendHttpResponse(status, [][2]string{{"x-from", "done"}}, []byte("done reply"), -1); err != nil {
			proxywasm.LogWarnf("done: reply %d: %v", id, err)
		}
	}
	clear(replyOnDone)
	if later {
		r.finishing = true
		return false
	}
	return true
}

func (r *rootContext) OnTick() {
	r.ticks++
	if _, ok := r.tokens["trap-tick"]; ok {
		panic("probe trap in on_tick")
	}
	for _, id := range r.resumeOnTick {
		if err := proxywasm.SetEffectiveContext(id); err != nil {
			proxywasm.LogWarnf("tick: set effective context %d: %v", id, err)
			continue
		}
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogWarnf("tick: resume %d: %v", id, err)
		}
	}
	r.resumeOnTick = nil
	for id, status := range r.replyOnTick {
		if err := proxywasm.SetEffectiveContext(id); err != nil {
			proxywasm.LogWarnf("tick: set effective context %d: %v", id, err)
			continue
		}
		if err := proxywasm.SendHttpResponse(status, [][2]string{{"x-from", "tick"}}, []byte("tick reply"), -1); err != nil {
			proxywasm.LogWarnf("tick: reply %d: %v", id, err)
		}
	}
	clear(r.replyOnTick)
	if r.finishing {
		r.finishing = false
		proxywasm.LogInfof("plugin_finish root=%d", r.id)
		proxywasm.PluginDone()
	}
}

func (r *rootContext) OnQueueReady(id uint32) {
	for {
		b, err := proxywasm.DequeueSharedQueue(id)
		if err != nil {
			return
		}
		r.queued = append(r.queued, string(b))
	}
}

func (r *rootContext) NewHttpContext(id uint32) types.HttpContext {
	return &httpContext{id: id, root: r}
}

type httpContext struct {
	types.DefaultHttpContext
	id         uint32
	root       *rootContext
	pause      bool
	respScript string
	logScript  string

	bodyOn     bool   // x-probe-body was set
	bodyScript string // its commands, run in each on_response_body
	chunks     int    // on_response_body calls so far
	bodySize   int    // the current chunk's body_buffer_length
	bodyPause  bool   // return Pause from the current on_response_body
}

func (c *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	script, _ := proxywasm.GetHttpRequestHeader("x-probe")
	c.respScript, _ = proxywasm.GetHttpRequestHeader("x-probe-resp")
	c.logScript, _ = proxywasm.GetHttpRequestHeader("x-probe-log")
	if b, err := proxywasm.GetHttpRequestHeader("x-probe-body"); err == nil {
		c.bodyOn, c.bodyScript = true, b
	}
	for i, res := range c.run(script) {
		_ = proxywasm.AddHttpRequestHeader("x-r"+strconv.Itoa(i), res)
	}
	if c.pause {
		return types.ActionPause
	}
	return types.ActionContinue
}

func (c *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	for i, res := range c.run(c.respScript) {
		_ = proxywasm.AddHttpResponseHeader("x-rr"+strconv.Itoa(i), res)
	}
	return types.ActionContinue
}

func (c *httpContext) OnHttpResponseBody(bodySize int, endOfStream bool) types.Action {
	if !c.bodyOn {
		return types.ActionContinue
	}
	c.chunks++
	c.bodySize, c.bodyPause = bodySize, false
	proxywasm.LogInfof("body-results: chunk=%d size=%d eos=%v: %s", c.chunks, bodySize, endOfStream,
		strings.Join(c.run(c.bodyScript), "|"))
	if c.bodyPause {
		return types.ActionPause
	}
	return types.ActionContinue
}

func (c *httpContext) OnHttpResponseTrailers(numTrailers int) types.Action {
	if c.bodyOn {
		proxywasm.LogInfof("trailers: n=%d", numTrailers)
	}
	return types.ActionContinue
}

func (c *httpContext) OnHttpStreamDone() {
	proxywasm.LogDebugf("stream_done ctx=%d", c.id)
	if c.logScript != "" {
		proxywasm.LogInfof("log-results: %s", strings.Join(c.run(c.logScript), "|"))
	}
}

func (c *httpContext) run(script string) []string {
	var out []string
	for _, cmd := range strings.Split(script, ";") {
		f := strings.Fields(cmd)
		if len(f) == 0 {
			continue
		}
		out = append(out, c.exec(f[0], f[1:]))
	}
	return out
}

func arg(a []string, i int) string {
	if i < len(a) {
		if a[i] == "_" {
			return ""
		}
		return a[i]
	}
	return ""
}

func errName(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, types.ErrorStatusNotFound):
		return "err:NotFound"
	case errors.Is(err, types.ErrorStatusBadArgument):
		return "err:BadArgument"
	case errors.Is(err, types.ErrorStatusCasMismatch):
		return "err:CasMismatch"
	case errors.Is(err, types.ErrorStatusEmpty):
		return "err:Empty"
	case errors.Is(err, types.ErrorInternalFailure):
		return "err:InternalFailure"
	case errors.Is(err, types.ErrorUnimplemented):
		return "err:Unimplemented"
	}
	return "err:" + strings.ReplaceAll(err.Error(), " ", "_")
}

// mapType is the proxy-wasm map a command names: request headers for
// h*, response headers for r*.
func mapType(command string) uint32 {
	if command[0] == 'r' {
		return 2
	}
	return 0
}

// pairs parses "k=v,k=v" ("_" = none).
func pairs(s string) [][2]string {
	var out [][2]string
	if s == "" || s == "_" {
		return out
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, [2]string{k, v})
	}
	return out
}

func fmtPairs(h [][2]string) string {
	parts := make([]string, len(h))
	for i, kv := range h {
		parts[i] = kv[0] + "=" + kv[1]
	}
	return strings.Join(parts, ",")
}

func atou(s string) uint32 {
	n, _ := strconv.ParseUint(s, 10, 32)
	return uint32(n)
}

func (c *httpContext) exec(name string, a []string) string {
	r := c.root
	switch name {
	// shared data
	case "get":
		v, cas, err := proxywasm.GetSharedData(arg(a, 0))
		if err != nil {
			return errName(err)
		}
		return "ok:" + string(v) + ":" + strconv.FormatUint(uint64(cas), 10)
	case "set":
		return errName(proxywasm.SetSharedData(arg(a, 0), []byte(arg(a, 1)), atou(arg(a, 2))))
	case "incr": // CAS increment of an existing numeric key
		for retries := 0; retries < 1000; retries++ {
			v, cas, err := proxywasm.GetSharedData(arg(a, 0))
			if err != nil {
				return errName(err)
			}
			n, _ := strconv.Atoi(string(v))
			err = proxywasm.SetSharedData(arg(a, 0), []byte(strconv.Itoa(n+1)), cas)
			if err == nil {
				return "ok:" + strconv.Itoa(n+1) + ":" + strconv.Itoa(retries)
			}
			if !errors.Is(err, types.ErrorStatusCasMismatch) {
				return errName(err)
			}
		}
		return "err:too_many_retries"

	// time
	case "now":
		return strconv.FormatInt(time.Now().UnixNano(), 10)
	case "since":
		return strconv.FormatInt(int64(time.Since(r.start)), 10)
	case "sleep":
		d, _ := time.ParseDuration(arg(a, 0))
		time.Sleep(d)
		return "ok"

	// failures
	case "trap":
		panic("probe trap")
	case "close":
		return errName(proxywasm.CloseDownstream())
	case "foreign":
		v, err := proxywasm.CallForeignFunction(arg(a, 0), []byte(arg(a, 1)))
		if err != nil {
			return errName(err)
		}
		return "ok:" + string(v)
	case "effective":
		err := proxywasm.SetEffectiveContext(atou(arg(a, 0)))
		_ = proxywasm.SetEffectiveContext(c.id)
		return errName(err)

	// headers: h* request, r* response
	case "hget", "rget":
		get := proxywasm.GetHttpRequestHeader
		if name[0] == 'r' {
			get = proxywasm.GetHttpResponseHeader
		}
		v, err := get(arg(a, 0))
		if err != nil {
			return errName(err)
		}
		return v
	case "hadd":
		return errName(proxywasm.AddHttpRequestHeader(arg(a, 0), arg(a, 1)))
	case "radd":
		return errName(proxywasm.AddHttpResponseHeader(arg(a, 0), arg(a, 1)))
	case "hrep":
		return errName(proxywasm.ReplaceHttpRequestHeader(arg(a, 0), arg(a, 1)))
	case "rrep":
		return errName(proxywasm.ReplaceHttpResponseHeader(arg(a, 0), arg(a, 1)))
	case "hdel":
		return errName(proxywasm.RemoveHttpRequestHeader(arg(a, 0)))
	case "rdel":
		return errName(proxywasm.RemoveHttpResponseHeader(arg(a, 0)))
	case "hpairs", "rpairs":
		get := proxywasm.GetHttpRequestHeaders
		if name[0] == 'r' {
			get = proxywasm.GetHttpResponseHeaders
		}
		h, err := get()
		if err != nil {
			return errName(err)
		}
		return fmtPairs(h)
	case "hraw", "rraw": // the map's bytes as the host encodes them, hex
		return rawPairs(mapType(name))
	case "hsize", "rsize":
		return mapSize(mapType(name))
	case "hset":
		return errName(proxywasm.ReplaceHttpRequestHeaders(pairs(arg(a, 0))))
	case "rset":
		return errName(proxywasm.ReplaceHttpResponseHeaders(pairs(arg(a, 0))))

	// the response body (x-probe-body)
	case "body":
		start, size := 0, c.bodySize
		if len(a) > 0 {
			start = int(atou(arg(a, 0)))
		}
		if len(a) > 1 {
			size = int(atou(arg(a, 1)))
		}
		b, err := proxywasm.GetHttpResponseBody(start, size)
		if err != nil {
			return errName(err)
		}
		return "hex:" + hex.EncodeToString(b)
	case "bodyraw":
		return rawBuffer(1, atou(arg(a, 0)), atou(arg(a, 1)))
	case "bodystatus":
		return bufferStatus(1)
	case "bodyset":
		return errName(proxywasm.ReplaceHttpResponseBody([]byte(arg(a, 0))))
	case "bodypause":
		c.bodyPause = true
		return "ok"

	// local replies and flow control
	case "reply":
		return errName(proxywasm.SendHttpResponse(atou(arg(a, 0)), pairs(arg(a, 1)), []byte(arg(a, 2)), -1))
	case "pause":
		c.pause = true
		return "ok"
	case "resume-now":
		return errName(proxywasm.ResumeHttpRequest())
	case "resume-on-tick":
		r.resumeOnTick = append(r.resumeOnTick, c.id)
		return "ok"
	case "reply-on-done":
		replyOnDone[c.id] = atou(arg(a, 0))
		return "ok"
	case "reply-on-tick":
		r.replyOnTick[c.id] = atou(arg(a, 0))
		return "ok"

	// properties
	case "prop":
		v, err := proxywasm.GetProperty(strings.Split(arg(a, 0), "."))
		if err != nil {
			return errName(err)
		}
		return string(v)
	case "prop1": // the whole path as one element
		v, err := proxywasm.GetProperty([]string{arg(a, 0)})
		if err != nil {
			return errName(err)
		}
		return string(v)
	case "propi":
		v, err := proxywasm.GetProperty(strings.Split(arg(a, 0), "."))
		if err != nil {
			return errName(err)
		}
		if len(v) != 8 {
			return "err:size_" + strconv.Itoa(len(v))
		}
		return strconv.FormatInt(int64(binary.LittleEndian.Uint64(v)), 10)
	case "propmap":
		m, err := proxywasm.GetPropertyMap(strings.Split(arg(a, 0), "."))
		if err != nil {
			return errName(err)
		}
		return fmtPairs(m)
	case "setprop":
		return errName(proxywasm.SetProperty(strings.Split(arg(a, 0), "."), []byte(arg(a, 1))))

	// metrics
	case "counter":
		if r.counters == nil {
			r.counters = map[string]proxywasm.MetricCounter{}
		}
		m, ok := r.counters[arg(a, 0)]
		if !ok {
			m = proxywasm.DefineCounterMetric(arg(a, 0))
			r.counters[arg(a, 0)] = m
		}
		if n := atou(arg(a, 1)); n > 0 {
			m.Increment(uint64(n))
		}
		return strconv.FormatUint(m.Value(), 10)
	case "gauge":
		if r.gauges == nil {
			r.gauges = map[string]proxywasm.MetricGauge{}
		}
		m, ok := r.gauges[arg(a, 0)]
		if !ok {
			m = proxywasm.DefineGaugeMetric(arg(a, 0))
			r.gauges[arg(a, 0)] = m
		}
		n, _ := strconv.ParseInt(arg(a, 1), 10, 64)
		m.Add(n)
		return strconv.FormatInt(m.Value(), 10)
	case "hist":
		if r.hists == nil {
			r.hists = map[string]proxywasm.MetricHistogram{}
		}
		m, ok := r.hists[arg(a, 0)]
		if !ok {
			m = proxywasm.DefineHistogramMetric(arg(a, 0))
			r.hists[arg(a, 0)] = m
		}
		n, _ := strconv.ParseUint(arg(a, 1), 10, 64)
		m.Record(n)
		return "ok"

	// http calls
	case "call":
		timeout := uint32(5000)
		if t := arg(a, 2); t != "" {
			timeout = atou(t)
		}
		id, err := proxywasm.DispatchHttpCall(arg(a, 0), pairs(arg(a, 1)), []byte(arg(a, 3)), nil, timeout,
			func(numHeaders, bodySize, numTrailers int) { c.onCallResponse(numHeaders, bodySize, numTrailers) })
		if err != nil {
			return errName(err)
		}
		return "ok:" + strconv.FormatUint(uint64(id), 10)

	// ticks, queues, lifecycle
	case "tick-period":
		return errName(proxywasm.SetTickPeriodMilliSeconds(atou(arg(a, 0))))
	case "ticks":
		return strconv.Itoa(r.ticks)
	case "register":
		id, err := proxywasm.RegisterSharedQueue(arg(a, 0))
		if err != nil {
			return errName(err)
		}
		return strconv.FormatUint(uint64(id), 10)
	case "resolve":
		id, err := proxywasm.ResolveSharedQueue(arg(a, 0), arg(a, 1))
		if err != nil {
			return errName(err)
		}
		return strconv.FormatUint(uint64(id), 10)
	case "enqueue":
		return errName(proxywasm.EnqueueSharedQueue(atou(arg(a, 0)), []byte(arg(a, 1))))
	case "dequeue":
		b, err := proxywasm.DequeueSharedQueue(atou(arg(a, 0)))
		if err != nil {
			return errName(err)
		}
		return string(b)
	case "queued":
		return strings.Join(r.queued, ",")
	case "done":
		proxywasm.PluginDone()
		return "ok"
	case "config":
		return r.config
	case "vmconfig":
		return r.vm.config
	case "root":
		return strconv.FormatUint(uint64(r.id), 10)
	case "ctx":
		return strconv.FormatUint(uint64(c.id), 10)
	case "env":
		return os.Getenv(arg(a, 0))
	case "gc":
		runtime.GC()
		return "ok"
	case "log":
		msg := strings.Join(a[min(1, len(a)):], " ")
		switch arg(a, 0) {
		case "trace":
			proxywasm.LogTrace(msg)
		case "debug":
			proxywasm.LogDebug(msg)
		case "info":
			proxywasm.LogInfo(msg)
		case "warn":
			proxywasm.LogWarn(msg)
		case "error":
			proxywasm.LogError(msg)
		case "critical":
			proxywasm.LogCritical(msg)
		}
		return "ok"
	}
	return "err:unknown_command_" + name
}

// onCallResponse runs in on_http_call_response with this stream as the
// effective context: it records the answer in the request header x-call
// (and in x-call-ticks how many ticks the root context had had, which shows
// whether a timeout came before or after a tick) and resumes the request,
// or replies 403 locally if the callout said 403.
func (c *httpContext) onCallResponse(numHeaders, bodySize, numTrailers int) {
	_ = proxywasm.AddHttpRequestHeader("x-call-ticks", strconv.Itoa(c.root.ticks))
	if numHeaders == 0 {
		_ = proxywasm.AddHttpRequestHeader("x-call", "failed")
		_ = proxywasm.ResumeHttpRequest()
		return
	}
	h, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		_ = proxywasm.AddHttpRequestHeader("x-call", errName(err))
		_ = proxywasm.ResumeHttpRequest()
		return
	}
	status := ""
	for _, kv := range h {
		if kv[0] == ":status" {
			status = kv[1]
		}
	}
	body, _ := proxywasm.GetHttpCallResponseBody(0, bodySize)
	_ = proxywasm.AddHttpRequestHeader("x-call", status+"|"+string(body))
	if numTrailers > 0 { // x-call-trailers: the trailer pairs, then the status of the get
		tr, err := proxywasm.GetHttpCallResponseTrailers()
		var b strings.Builder
		for _, kv := range tr {
			b.WriteString(kv[0] + "=" + kv[1] + ",")
		}
		_ = proxywasm.AddHttpRequestHeader("x-call-trailers", b.String()+"|"+errName(err))
	}
	if status == "403" {
		_ = proxywasm.SendHttpResponse(403, [][2]string{{"x-from", "callout"}}, nil, -1)
		return
	}
	_ = proxywasm.ResumeHttpRequest()
}
