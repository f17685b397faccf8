package wasmhost

import (
	"context"
	"crypto/rand"
	"encoding/binary"
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
	for _, f := range hostFuncs {
		fn := f.fn
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
				stack[0] = uint64(fn(vmOf(ctx, mod), stack))
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

// ---- guest memory helpers ----

// view returns guest memory [ptr, ptr+size) without copying. A view is
// invalid after anything that may grow memory (malloc).
func (vm *VM) view(ptr, size uint32) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return vm.mem.Read(ptr, size)
}

// copyOut returns data to the guest as proxy-wasm-cpp-host does: allocate
// in the guest (malloc or proxy_on_memory_allocate) and write the pointer and size;
// empty data is returned as pointer 0, size 0 without allocating.
func copyOut[T string | []byte](vm *VM, data T, ptrPtr, sizePtr uint32) Status {
	var ptr uint32
	if len(data) > 0 {
		ptr = vm.malloc(uint32(len(data)))
		buf, ok := vm.mem.Read(ptr, uint32(len(data)))
		if !ok {
			return StatusInvalidMemoryAccess
		}
		copy(buf, data)
	}
	if !vm.mem.WriteUint32Le(ptrPtr, ptr) || !vm.mem.WriteUint32Le(sizePtr, uint32(len(data))) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// pairsSize is the size of h in the proxy-wasm map encoding.
func pairsSize(h []Header) int {
	size := 4
	for _, kv := range h {
		size += 8 + len(kv[0]) + len(kv[1]) + 2
	}
	return size
}

// marshalPairs encodes h into buf (len(buf) == pairsSize(h)):
// count, then (name size, value size) per entry, then names and values,
// each followed by a NUL.
func marshalPairs(buf []byte, h []Header) {
	binary.LittleEndian.PutUint32(buf, uint32(len(h)))
	p := 4
	for _, kv := range h {
		binary.LittleEndian.PutUint32(buf[p:], uint32(len(kv[0])))
		binary.LittleEndian.PutUint32(buf[p+4:], uint32(len(kv[1])))
		p += 8
	}
	for _, kv := range h {
		p += copy(buf[p:], kv[0])
		buf[p] = 0
		p++
		p += copy(buf[p:], kv[1])
		buf[p] = 0
		p++
	}
}

func exportPairs(vm *VM, h []Header, ptrPtr, sizePtr uint32) Status {
	if len(h) == 0 {
		if !vm.mem.WriteUint32Le(ptrPtr, 0) || !vm.mem.WriteUint32Le(sizePtr, 0) {
			return StatusInvalidMemoryAccess
		}
		return StatusOK
	}
	size := uint32(pairsSize(h))
	ptr := vm.malloc(size)
	buf, ok := vm.mem.Read(ptr, size)
	if !ok {
		return StatusInvalidMemoryAccess
	}
	marshalPairs(buf, h)
	if !vm.mem.WriteUint32Le(ptrPtr, ptr) || !vm.mem.WriteUint32Le(sizePtr, size) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// parsePairs decodes a proxy-wasm map, lower-casing names if lowerNames.
// It never panics on malformed input.
func parsePairs(b []byte, lowerNames bool) ([]Header, bool) {
	if len(b) == 0 {
		return nil, true
	}
	if len(b) < 4 {
		return nil, false
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if 4+n*8 > uint64(len(b)) {
		return nil, false
	}
	out := make([]Header, 0, n)
	sizes := 4
	data := uint64(4 + n*8)
	for i := uint64(0); i < n; i++ {
		ks := uint64(binary.LittleEndian.Uint32(b[sizes:]))
		vs := uint64(binary.LittleEndian.Uint32(b[sizes+4:]))
		sizes += 8
		if data+ks+1+vs+1 > uint64(len(b)) {
			return nil, false
		}
		k := string(b[data : data+ks])
		data += ks + 1
		v := string(b[data : data+vs])
		data += vs + 1
		if lowerNames {
			k = lower(k)
		}
		out = append(out, Header{k, v})
	}
	return out, true
}

// lowerKey returns b lower-cased, in vm.scratch if it had to change.
func (vm *VM) lowerKey(b []byte) []byte {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			s := append(vm.scratch[:0], b...)
			for j := i; j < len(s); j++ {
				if c := s[j]; 'A' <= c && c <= 'Z' {
					s[j] = c + 'a' - 'A'
				}
			}
			vm.scratch = s
			return s
		}
	}
	return b
}

func u32(v uint64) uint32 { return uint32(v) }

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
		Details:    string(details),
		Headers:    headers,
		Body:       append([]byte(nil), body...),
		GRPCStatus: int32(u32(st[7])),
	}
	s.local = local
	s.localPending = true
	s.localInResp = s.state == stResponse
	s.localFinal = localReplyHeaders(local)
	vm.touch(s)
	return StatusOK
}

// localReplyHeaders builds the headers Envoy's sendLocalReply sends:
// :status, the plugin's headers, and for a non-empty body content-length and
// (unless set) content-type text/plain.
func localReplyHeaders(l *LocalResponse) []Header {
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

// headerMap returns the map of type t for the current context, and whether
// it may be modified. A map that does not exist now (the response headers
// during the request phase, any map outside a stream) gives BadArgument,
// as in Envoy.
func (vm *VM) headerMap(t uint32, write bool) (*[]Header, Status) {
	switch t {
	case mapRequestHeaders, mapResponseHeaders:
		s := vm.cur.stream
		if s == nil {
			return nil, StatusBadArgument
		}
		if write && s.state >= stFinishing {
			return nil, StatusBadArgument // access-log phase: maps are read-only
		}
		if t == mapRequestHeaders {
			if !s.hasReq {
				return nil, StatusBadArgument
			}
			if write && s.reqShared {
				s.req, s.reqShared = cloneHeaders(s.req), false
			}
			return &s.req, StatusOK
		}
		if !s.hasResp {
			return nil, StatusBadArgument
		}
		if write && s.respShared {
			s.resp, s.respShared = cloneHeaders(s.resp), false
		}
		return &s.resp, StatusOK
	case mapResponseTrailers:
		s := vm.cur.stream
		if s == nil || !s.hasTrailers || write {
			return nil, StatusBadArgument // read-only here: the filter only reads them
		}
		return &s.trailers, StatusOK
	case mapHTTPCallRespHeaders, mapHTTPCallRespTrailers:
		r := vm.cur.callResp
		if r == nil {
			return nil, StatusBadArgument
		}
		if t == mapHTTPCallRespHeaders {
			return &r.headers, StatusOK
		}
		return &r.trailers, StatusOK
	}
	return nil, StatusBadArgument
}

func hGetHeader(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), false)
	if status != StatusOK {
		return status
	}
	kb, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	key := vm.lowerKey(kb)
	for _, kv := range *m {
		if kv[0] == string(key) {
			return copyOut(vm, kv[1], u32(st[3]), u32(st[4]))
		}
	}
	return StatusNotFound
}

func (vm *VM) headerKV(st []uint64) (string, string, Status) {
	kb, ok1 := vm.view(u32(st[1]), u32(st[2]))
	vb, ok2 := vm.view(u32(st[3]), u32(st[4]))
	if !ok1 || !ok2 {
		return "", "", StatusInvalidMemoryAccess
	}
	return string(vm.lowerKey(kb)), string(vb), StatusOK
}

func hAddHeader(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), true)
	if status != StatusOK {
		return status
	}
	k, v, status := vm.headerKV(st)
	if status != StatusOK {
		return status
	}
	*m = append(*m, Header{k, v})
	return StatusOK
}

func hReplaceHeader(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), true)
	if status != StatusOK {
		return status
	}
	k, v, status := vm.headerKV(st)
	if status != StatusOK {
		return status
	}
	for i := range *m {
		if (*m)[i][0] == k {
			(*m)[i][1] = v
			return StatusOK
		}
	}
	*m = append(*m, Header{k, v})
	return StatusOK
}

func hRemoveHeader(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), true)
	if status != StatusOK {
		return status
	}
	kb, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	key := vm.lowerKey(kb)
	out := (*m)[:0]
	for _, kv := range *m {
		if kv[0] != string(key) {
			out = append(out, kv)
		}
	}
	clear((*m)[len(out):])
	*m = out
	return StatusOK
}

func hGetPairs(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), false)
	if status != StatusOK {
		return status
	}
	return exportPairs(vm, *m, u32(st[1]), u32(st[2]))
}

func hSetPairs(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), true)
	if status != StatusOK {
		return status
	}
	b, ok := vm.view(u32(st[1]), u32(st[2]))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	h, ok := parsePairs(b, true)
	if !ok {
		return StatusBadArgument
	}
	*m = h
	return StatusOK
}

func hGetMapSize(vm *VM, st []uint64) Status {
	m, status := vm.headerMap(u32(st[0]), false)
	if status != StatusOK {
		return status
	}
	if !vm.mem.WriteUint32Le(u32(st[1]), uint32(pairsSize(*m))) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
}

// buffer returns the buffer of type t available now, or nil.
func (vm *VM) buffer(t uint32) ([]byte, bool) {
	switch t {
	case bufVMConfiguration:
		return vm.h.cfg.VMConfig, true
	case bufPluginConfiguration:
		if vm.cur.configuring {
			return vm.cur.pluginConfig, true
		}
	case bufHTTPCallResponse:
		if r := vm.cur.callResp; r != nil {
			return r.body, true
		}
	}
	return nil, false
}

func hGetBuffer(vm *VM, st []uint64) Status {
	t := u32(st[0])
	if t > bufMax {
		return StatusBadArgument
	}
	buf, ok := vm.buffer(t)
	if !ok {
		return StatusNotFound
	}
	start, length := uint64(u32(st[1])), uint64(u32(st[2]))
	if start > uint64(len(buf)) {
		return StatusBadArgument
	}
	if start+length > uint64(len(buf)) {
		length = uint64(len(buf)) - start
	}
	if length == 0 {
		return StatusOK // as cpp-host: nothing is written
	}
	return copyOut(vm, buf[start:start+length], u32(st[3]), u32(st[4]))
}

func hSetBuffer(vm *VM, st []uint64) Status {
	t := u32(st[0])
	if t > bufMax {
		return StatusBadArgument
	}
	if _, ok := vm.buffer(t); !ok {
		return StatusNotFound
	}
	return StatusUnimplemented // the available buffers are read-only
}

func hGetBufferStatus(vm *VM, st []uint64) Status {
	t := u32(st[0])
	buf, ok := vm.buffer(t)
	if !ok {
		return StatusNotFound
	}
	if !vm.mem.WriteUint32Le(u32(st[1]), uint32(len(buf))) || !vm.mem.WriteUint32Le(u32(st[2]), 0) {
		return StatusInvalidMemoryAccess
	}
	return StatusOK
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
