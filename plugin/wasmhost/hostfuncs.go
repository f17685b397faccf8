package wasmhost

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// Header map types (proxy-wasm MapType).
const (
	mapRequestHeaders       = 0
	mapRequestTrailers      = 1
	mapResponseHeaders      = 2
	mapResponseTrailers     = 3
	mapGrpcReceiveInitial   = 4
	mapGrpcReceiveTrailing  = 5
	mapHTTPCallRespHeaders  = 6
	mapHTTPCallRespTrailers = 7
)

// Buffer types (proxy-wasm BufferType).
const (
	bufRequestBody         = 0
	bufResponseBody        = 1
	bufHTTPCallResponse    = 4
	bufVMConfiguration     = 6
	bufPluginConfiguration = 7
	bufMax                 = 8
)

type hostFunc struct {
	name    string
	params  []api.ValueType
	results []api.ValueType
	fn      func(vm *VM, stack []uint64) Status
}

func params(n int) []api.ValueType {
	p := make([]api.ValueType, n)
	for i := range p {
		p[i] = i32
	}
	return p
}

var status32 = []api.ValueType{i32}

// hostFuncs are the "env" imports of the proxy-wasm ABI 0.2.x as Envoy
// (proxy-wasm-cpp-host) provides them.
var hostFuncs = []hostFunc{
	{"proxy_log", params(3), status32, hLog},
	{"proxy_get_log_level", params(1), status32, hGetLogLevel},
	{"proxy_get_current_time_nanoseconds", params(1), status32, hCurrentTime},
	{"proxy_send_local_response", params(8), status32, hSendLocalResponse},
	{"proxy_get_shared_data", params(5), status32, hGetSharedData},
	{"proxy_set_shared_data", params(5), status32, hSetSharedData},
	{"proxy_register_shared_queue", params(3), status32, hRegisterQueue},
	{"proxy_resolve_shared_queue", params(5), status32, hResolveQueue},
	{"proxy_enqueue_shared_queue", params(3), status32, hEnqueue},
	{"proxy_dequeue_shared_queue", params(3), status32, hDequeue},
	{"proxy_get_header_map_value", params(5), status32, hGetHeader},
	{"proxy_add_header_map_value", params(5), status32, hAddHeader},
	{"proxy_replace_header_map_value", params(5), status32, hReplaceHeader},
	{"proxy_remove_header_map_value", params(3), status32, hRemoveHeader},
	{"proxy_get_header_map_pairs", params(3), status32, hGetPairs},
	{"proxy_set_header_map_pairs", params(3), status32, hSetPairs},
	{"proxy_get_header_map_size", params(2), status32, hGetMapSize},
	{"proxy_get_buffer_bytes", params(5), status32, hGetBuffer},
	{"proxy_set_buffer_bytes", params(5), status32, hSetBuffer},
	{"proxy_get_buffer_status", params(3), status32, hGetBufferStatus},
	{"proxy_continue_stream", params(1), status32, hContinueStream},
	{"proxy_close_stream", params(1), status32, hUnimplemented},
	{"proxy_http_call", params(10), status32, hHTTPCall},
	{"proxy_call_foreign_function", params(6), status32, hForeign},
	{"proxy_set_tick_period_milliseconds", params(1), status32, hSetTickPeriod},
	{"proxy_set_effective_context", params(1), status32, hSetEffectiveContext},
	{"proxy_done", nil, status32, hDone},
	{"proxy_define_metric", params(4), status32, hDefineMetric},
	{"proxy_increment_metric", []api.ValueType{i32, i64}, status32, hIncrementMetric},
	{"proxy_record_metric", []api.ValueType{i32, i64}, status32, hRecordMetric},
	{"proxy_get_metric", params(2), status32, hGetMetric},
	{"proxy_get_property", params(4), status32, hGetProperty},
	{"proxy_set_property", params(4), status32, hSetProperty},
}

// vmOf finds the VM a host function was called for: every guest call
// carries its VM's context, checked against the caller module.
func vmOf(ctx context.Context, mod api.Module) *VM {
	if c, ok := ctx.(*vmContext); ok && c.vm.mod == mod {
		return c.vm
	}
	if v, ok := modules.Load(mod); ok {
		return v.(*VM)
	}
	panic(fmt.Sprintf("wasmhost: host function called by unknown module %q", mod.Name()))
}

func (h *Host) instantiateEnv(ctx context.Context) error {
	b := h.rt.NewHostModuleBuilder("env")
	defined := map[string]bool{}
	for i, f := range hostFuncs {
		fn := f.fn
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
				vm := vmOf(ctx, mod)
				vm.hostCalls[i]++
				stack[0] = uint64(fn(vm, stack))
			}), f.params, f.results).
			WithName(f.name).
			Export(f.name)
		defined[f.name] = true
	}
	// Anything else the module imports from env gets a stub answering
	// Unimplemented (or zeros), rather than failing instantiation.
	for _, imp := range h.mod.ImportedFunctions() {
		module, name, _ := imp.Import()
		if module != "env" || defined[name] {
			continue
		}
		results := imp.ResultTypes()
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
				for i := range results {
					stack[i] = 0
				}
				if len(results) == 1 && results[0] == i32 {
					stack[0] = uint64(StatusUnimplemented)
				}
			}), imp.ParamTypes(), results).
			WithName(name).
			Export(name)
		defined[name] = true
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("wasmhost: instantiating the env host module: %w", err)
	}
	return nil
}

func vmModuleConfig(h *Host, vm *VM) wazero.ModuleConfig {
	mc := wazero.NewModuleConfig().
		WithName(vm.name).
		WithStartFunctions().
		WithWalltime(h.clocks.walltime, 1).
		WithNanotime(h.clocks.nanotime, 1).
		WithNanosleep(h.clocks.nanosleep).
		WithStdout(&vm.stderr).
		WithStderr(&vm.stderr).
		WithRandSource(rand.Reader)
	for _, k := range sortedKeys(h.cfg.Env) {
		mc = mc.WithEnv(k, h.cfg.Env[k])
	}
	return mc
}

// ---- host functions ----

func hUnimplemented(*VM, []uint64) Status { return StatusUnimplemented }

func hLog(vm *VM, st []uint64) Status {
	msg, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	level := LogLevel(u32(st[0]))
	if level < LogLevelTrace || level > LogLevelCritical {
		return StatusBadArgument
	}
	vm.h.log(vm.id, level, string(msg))
	return StatusOK
}

func hGetLogLevel(vm *VM, st []uint64) Status {
	if !vm.mem.WriteUint32Le(u32(st[0]), uint32(LogLevelTrace)) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func hCurrentTime(vm *VM, st []uint64) Status {
	if !vm.mem.WriteUint64Le(u32(st[0]), uint64(vm.h.clock.Now().UnixNano())) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func hSendLocalResponse(vm *VM, st []uint64) Status {
	s := vm.cur.stream
	if s == nil || s.state >= stFinishing || s.state == stCreated || s.local != nil {
		return StatusBadArgument
	}
	details, ok1 := vm.view(u32(st[1]), u32(st[2]))
	body, ok2 := vm.view(u32(st[3]), u32(st[4]))
	hdrs, ok3 := vm.view(u32(st[5]), u32(st[6]))
	if !ok1 || !ok2 || !ok3 {
		return StatusInvalidMemoryAccess
	}
	headers, ok := parsePairs(hdrs, true)
	if !ok {
		return StatusBadArgument
	}
	local := &LocalResponse{
		Status:     int(u32(st[0])),
		Details:    replaceEmptySpace(details),
		Headers:    headers,
		Body:       append([]byte(nil), body...),
		GRPCStatus: int32(u32(st[7])),
		GRPC:       isGRPCRequest(s.req),
	}
	s.local = local
	s.localPending = true
	s.localInResp = s.state == stResponse
	s.localInBody = s.respSent
	s.localFinal = localReplyHeaders(local)
	vm.touch(s)
	return StatusOK
}

// localReplyHeaders builds the headers Envoy's sendLocalReply sends:
// :status, the plugin's headers, and for a non-empty body content-length and
// (unless set) content-type text/plain; to a gRPC request, a trailers-only
// reply (grpc_reply.go).
func localReplyHeaders(l *LocalResponse) []Header {
	if l.GRPC {
		return grpcReplyHeaders(l)
	}
	h := make([]Header, 0, len(l.Headers)+3)
	h = append(h, Header{":status", itoa(l.Status)})
	h = append(h, l.Headers...)
	if len(l.Body) > 0 {
		h = append(h, Header{"content-length", itoa(len(l.Body))})
		hasType := false
		for _, kv := range l.Headers {
			if kv[0] == "content-type" {
				hasType = true
			}
		}
		if !hasType {
			h = append(h, Header{"content-type", "text/plain"})
		}
	}
	return h
}

func hGetSharedData(vm *VM, st []uint64) Status {
	key, ok := vm.view(u32(st[0]), u32(st[1]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	value, cas, status := vm.h.shared.get(key, vm.sharedBuf[:0])
	vm.sharedBuf = value
	if status != StatusOK {
		return status
	}
	if s := copyOut(vm, value, u32(st[2]), u32(st[3])); s != StatusOK {
		return s
	}
	if !vm.mem.WriteUint32Le(u32(st[4]), cas) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func hSetSharedData(vm *VM, st []uint64) Status {
	key, ok1 := vm.view(u32(st[0]), u32(st[1]))
	value, ok2 := vm.view(u32(st[2]), u32(st[3]))
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	return vm.h.shared.set("", key, value, u32(st[4]), true)
}

func hRegisterQueue(vm *VM, st []uint64) Status {
	name, ok := vm.view(u32(st[0]), u32(st[1]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	root := vm.cur.root
	if root == nil {
		return StatusBadArgument
	}
	id := vm.h.queues.register(vm.h.cfg.VMID, string(name), vm, root.id)
	if !vm.mem.WriteUint32Le(u32(st[2]), id) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func hResolveQueue(vm *VM, st []uint64) Status {
	vmID, ok1 := vm.view(u32(st[0]), u32(st[1]))
	name, ok2 := vm.view(u32(st[2]), u32(st[3]))
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	id, ok := vm.h.queues.resolve(string(vmID), string(name))
	if !ok {
		return StatusNotFound
	}
	if !vm.mem.WriteUint32Le(u32(st[4]), id) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func hEnqueue(vm *VM, st []uint64) Status {
	data, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	target, ctxID, status := vm.h.queues.enqueue(u32(st[0]), append([]byte(nil), data...))
	if status == StatusOK && target != nil {
		target.notifyQueue(ctxID, u32(st[0]))
	}
	return status
}

func hDequeue(vm *VM, st []uint64) Status {
	item, status := vm.h.queues.dequeue(u32(st[0]))
	if status != StatusOK {
		return status
	}
	return copyOut(vm, item, u32(st[1]), u32(st[2]))
}

func hContinueStream(vm *VM, st []uint64) Status {
	switch u32(st[0]) {
	case 0, 1: // request, response
	default:
		return StatusUnimplemented // L4 streams
	}
	s := vm.cur.stream
	if s == nil || s.state >= stFinishing {
		return StatusBadArgument
	}
	if u32(st[0]) == 0 {
		s.continueReq = true
		vm.touch(s)
	}
	// Resuming the response is accepted; a paused response is not modelled.
	return StatusOK
}

func hHTTPCall(vm *VM, st []uint64) Status {
	root := vm.cur.root
	if root == nil {
		return StatusBadArgument
	}
	cluster, ok1 := vm.view(u32(st[0]), u32(st[1]))
	hb, ok2 := vm.view(u32(st[2]), u32(st[3]))
	body, ok3 := vm.view(u32(st[4]), u32(st[5]))
	tb, ok4 := vm.view(u32(st[6]), u32(st[7]))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return StatusInvalidMemoryAccess
	}
	headers, ok := parsePairs(hb, true)
	if !ok {
		return StatusBadArgument
	}
	trailers, ok := parsePairs(tb, true)
	if !ok {
		return StatusBadArgument
	}
	if len(cluster) == 0 || (vm.h.clusters != nil && !vm.h.clusters[string(cluster)]) {
		return StatusBadArgument
	}
	var method, path, authority bool
	for _, kv := range headers {
		switch kv[0] {
		case ":method":
			method = true
		case ":path":
			path = true
		case ":authority":
			authority = true
		}
	}
	if !method || !path || !authority {
		return StatusBadArgument
	}
	// Callout ids as proxy-wasm-cpp-host hands them out to Envoy
	// (WasmBase::nextHttpCallId): 4, 8, 12, ..., the low two bits being the
	// callout type (0: HTTP call).
	id := vm.nextCallID
	for id == 0 || vm.calls[id] != nil {
		id += 4
	}
	vm.nextCallID = id + 4
	timeout := u32(st[8])
	c := &HTTPCall{
		VM:       vm.id,
		Cluster:  string(cluster),
		Headers:  headers,
		Body:     append([]byte(nil), body...),
		Trailers: trailers,
		Timeout:  msDuration(timeout),
		ID:       id,
		Context:  root.id,
		vm:       vm,
		root:     root,
		done:     make(chan struct{}),
	}
	if timeout > 0 {
		c.deadline = vm.h.clocks.nanotime() + int64(c.Timeout)
	}
	if !vm.mem.WriteUint32Le(u32(st[9]), id) {
		return StatusInvalidMemoryAccess
	}
	vm.calls[id] = c
	vm.h.calls.add(c)
	if c.deadline != 0 {
		vm.updateDue()
	}
	if vm.h.cfg.HTTPCalls != nil {
		vm.outbox = append(vm.outbox, c)
	}
	return StatusOK
}

func hForeign(vm *VM, st []uint64) Status {
	name, ok1 := vm.view(u32(st[0]), u32(st[1]))
	param, ok2 := vm.view(u32(st[2]), u32(st[3]))
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	f := vm.h.cfg.ForeignFunctions[string(name)]
	if f == nil {
		return StatusNotFound
	}
	out, err := f(append([]byte(nil), param...))
	if err != nil {
		return StatusInternalFailure
	}
	return copyOut(vm, out, u32(st[4]), u32(st[5]))
}

func hSetTickPeriod(vm *VM, st []uint64) Status {
	root := vm.cur.root
	if root == nil {
		return StatusBadArgument
	}
	root.tickPeriod = int64(msDuration(u32(st[0])))
	root.nextTick = vm.h.clocks.nanotime() + root.tickPeriod
	vm.updateDue()
	return StatusOK
}

func hSetEffectiveContext(vm *VM, st []uint64) Status {
	id := u32(st[0])
	if s := vm.streams[id]; s != nil {
		vm.cur.effective, vm.cur.stream, vm.cur.root = id, s, s.root
		return StatusOK
	}
	if r := vm.roots[id]; r != nil {
		vm.cur.effective, vm.cur.stream, vm.cur.root = id, nil, r
		return StatusOK
	}
	return StatusBadArgument
}

func hDone(vm *VM, _ []uint64) Status {
	root := vm.cur.root
	if root == nil || !root.pendingDone {
		return StatusNotFound
	}
	root.pendingDone = false
	vm.retire = append(vm.retire, root)
	return StatusOK
}

func hDefineMetric(vm *VM, st []uint64) Status {
	t := u32(st[0])
	if t > metricHistogram {
		return StatusBadArgument
	}
	name, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	id := vm.defineMetric(t, name)
	if !vm.mem.WriteUint32Le(u32(st[3]), id) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func hIncrementMetric(vm *VM, st []uint64) Status {
	m := vm.metric(u32(st[0]))
	if m == nil {
		return StatusNotFound
	}
	offset := int64(st[1])
	switch m.typ {
	case metricCounter:
		if offset <= 0 {
			return StatusBadArgument // Envoy counters only go up
		}
		m.v.Add(offset)
	case metricGauge:
		m.v.Add(offset)
	default:
		return StatusBadArgument
	}
	return StatusOK
}

func hRecordMetric(vm *VM, st []uint64) Status {
	m := vm.metric(u32(st[0]))
	if m == nil {
		return StatusNotFound
	}
	switch m.typ {
	case metricCounter:
		m.v.Add(int64(st[1]))
	case metricGauge:
		m.v.Store(int64(st[1]))
	case metricHistogram:
		m.record(st[1])
	}
	return StatusOK
}

func hGetMetric(vm *VM, st []uint64) Status {
	m := vm.metric(u32(st[0]))
	if m == nil {
		return StatusNotFound
	}
	if m.typ == metricHistogram {
		return StatusBadArgument
	}
	if !vm.mem.WriteUint64Le(u32(st[1]), uint64(m.v.Load())) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

func hGetProperty(vm *VM, st []uint64) Status {
	path, ok := vm.view(u32(st[0]), u32(st[1]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	v, found := vm.property(path)
	if !found {
		return StatusNotFound
	}
	return copyOut(vm, v, u32(st[2]), u32(st[3]))
}

func hSetProperty(vm *VM, st []uint64) Status {
	path, ok1 := vm.view(u32(st[0]), u32(st[1]))
	value, ok2 := vm.view(u32(st[2]), u32(st[3]))
	if !ok1 || !ok2 {
		return StatusInvalidMemoryAccess
	}
	if len(path) == 0 {
		return StatusBadArgument
	}
	v := append([]byte(nil), value...)
	if s := vm.cur.stream; s != nil {
		if s.setProps == nil {
			s.setProps = map[string][]byte{}
		}
		s.setProps[string(path)] = v
		return StatusOK
	}
	if r := vm.cur.root; r != nil {
		if r.props == nil {
			r.props = map[string][]byte{}
		}
		r.props[string(path)] = v
		return StatusOK
	}
	return StatusBadArgument
}

func msDuration(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }

func itoa(n int) string {
	if n >= 0 && n < 1000 {
		return smallInts[n]
	}
	return fmt.Sprint(n)
}

var smallInts = func() (s [1000]string) {
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return
}()

// replaceEmptySpace is the details of a local reply as Envoy keeps them
// (StringUtil::replaceAllEmptySpace): space, tab, form feed, vertical tab,
// newline and carriage return each become '_'.
func replaceEmptySpace(b []byte) string {
	out := []byte(string(b))
	for i, c := range out {
		switch c {
		case ' ', '\t', '\f', '\v', '\n', '\r':
			out[i] = '_'
		}
	}
	return string(out)
}
