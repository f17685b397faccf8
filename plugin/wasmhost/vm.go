package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// VM is one instance of the module, like the VM of one Envoy worker thread.
//
// Everything that runs guest code on a VM is serialized: a callback (or a
// whole stream for HTTP) runs to completion before the next starts, exactly
// as on a worker thread. Synchronous calls (HTTP, stream methods, Tick) run
// the guest on the caller's goroutine while holding the VM; asynchronous
// events (HTTP call responses, shared-queue notifications, background ticks)
// are queued to the VM's own goroutine. All methods are goroutine-safe.
type VM struct {
	h    *Host
	id   int
	mod  api.Module
	mem  api.Memory
	ctx  *vmContext
	name string

	allocator string // the export malloc calls: "malloc" or "proxy_on_memory_allocate"
	sharedBuf []byte // a shared-data value on its way to the guest (reused)
	fn        struct {
		malloc, initialize, contextCreate, vmStart, configure, requestHeaders, responseHeaders,
		responseBody, responseTrailers, log, done, delete, tick, httpCallResponse, queueReady api.Function
	}

	sem   chan struct{} // held while the guest runs; guards the fields below
	async asyncQueue
	stop  chan struct{}
	loopD chan struct{}

	nextDue atomic.Int64 // monotonic nanos of the earliest tick/timeout; MaxInt64 = none
	tickQ   atomic.Bool  // a background tick is queued
	errV    atomic.Value // *TrapError once broken
	stderr  tailBuffer

	// Guarded by sem.
	hostCalls     []uint64 // by hostFuncs index: HostCalls
	broken        *TrapError
	closed        bool
	nextContextID uint32
	nextCallID    uint32
	root          *rootContext            // the root context in force
	roots         map[uint32]*rootContext // live root contexts
	streams       map[uint32]*Stream      // live stream contexts
	spare         *Stream                 // a finished stream of HTTP, for reuse
	calls         map[uint32]*HTTPCall    // pending calls by callout id
	cur           callState
	touched       []*Stream // streams the guest acted on during the current callback
	touchedHead   int
	retire        []*rootContext
	outbox        []*HTTPCall
	metricIDs     map[metricKey]uint32
	metricByID    []*metric
	stack         [8]uint64
	mstack        [1]uint64
	scratch       []byte
	props         []byte // property value scratch
	logStart      int    // first log index of the current startup (for errors)
}

// vmContext is the context.Context every guest call on a VM carries, so
// host functions find their VM without a lookup (and check it against the
// caller module).
type vmContext struct {
	context.Context
	vm *VM
}

type vmKey struct{}

func (c *vmContext) Value(k any) any {
	if k == (vmKey{}) {
		return c.vm
	}
	return c.Context.Value(k)
}

// rootContext is one root (plugin) context of a VM.
type rootContext struct {
	id          uint32
	config      []byte
	tickPeriod  int64 // nanoseconds; 0 = no ticks
	nextTick    int64 // monotonic nanos
	pendingDone bool  // on_done returned false; waiting for proxy_done
	deleted     bool
	retiring    bool              // on_done called (or about to be)
	superseded  bool              // replaced by a newer root; retire once its streams end
	streams     int               // live streams created on this root context
	props       map[string][]byte // set_property on the root context
}

// callState describes the callback running on the VM.
type callState struct {
	effective    uint32
	stream       *Stream       // the effective context's stream (nil for a root context)
	root         *rootContext  // the effective context's root
	pluginConfig []byte        // non-nil during proxy_on_configure
	configuring  bool          // proxy_on_configure: the plugin configuration buffer exists
	callResp     *callResponse // during proxy_on_http_call_response
}

func (h *Host) newVM(ctx context.Context, id int) (*VM, error) {
	name := fmt.Sprintf("vm%d-%d", id, h.nameSeq.Add(1))
	vm := &VM{
		h:             h,
		id:            id,
		name:          name,
		sem:           make(chan struct{}, 1),
		stop:          make(chan struct{}),
		loopD:         make(chan struct{}),
		nextContextID: 1,
		nextCallID:    4,
		roots:         map[uint32]*rootContext{},
		streams:       map[uint32]*Stream{},
		calls:         map[uint32]*HTTPCall{},
		metricIDs:     map[metricKey]uint32{},
		scratch:       make([]byte, 0, 256),
		props:         make([]byte, 0, 64),
		hostCalls:     make([]uint64, len(hostFuncs)),
	}
	vm.nextDue.Store(math.MaxInt64)
	vm.ctx = &vmContext{Context: context.Background(), vm: vm}
	vm.async.init()
	vm.stderr.max = 8 << 10
	vm.stderr.echo = h.cfg.LogWriter
	vm.stderr.prefix = fmt.Sprintf("[wasm vm %d stderr] ", id)

	mc := vmModuleConfig(h, vm)
	mod, err := h.rt.InstantiateModule(ctx, h.mod, mc)
	if err != nil {
		return nil, fmt.Errorf("wasmhost: vm %d: instantiating the module: %w", id, err)
	}
	vm.mod = mod
	vm.mem = mod.Memory()
	if vm.mem == nil {
		mod.Close(context.Background())
		return nil, fmt.Errorf("wasmhost: vm %d: the module has no exported memory", id)
	}
	registerModule(mod, vm)
	f := &vm.fn
	// Envoy's allocator lookup (proxy-wasm-cpp-host WasmBase::getFunctions):
	// an export named malloc wins over proxy_on_memory_allocate.
	vm.allocator = "malloc"
	if f.malloc = mod.ExportedFunction("malloc"); f.malloc == nil {
		vm.allocator = "proxy_on_memory_allocate"
		f.malloc = mod.ExportedFunction(vm.allocator)
	}
	f.initialize = mod.ExportedFunction("_initialize")
	f.contextCreate = mod.ExportedFunction("proxy_on_context_create")
	f.vmStart = mod.ExportedFunction("proxy_on_vm_start")
	f.configure = mod.ExportedFunction("proxy_on_configure")
	f.requestHeaders = mod.ExportedFunction("proxy_on_request_headers")
	f.responseHeaders = mod.ExportedFunction("proxy_on_response_headers")
	f.responseBody = mod.ExportedFunction("proxy_on_response_body")
	f.responseTrailers = mod.ExportedFunction("proxy_on_response_trailers")
	f.log = mod.ExportedFunction("proxy_on_log")
	f.done = mod.ExportedFunction("proxy_on_done")
	f.delete = mod.ExportedFunction("proxy_on_delete")
	f.tick = mod.ExportedFunction("proxy_on_tick")
	f.httpCallResponse = mod.ExportedFunction("proxy_on_http_call_response")
	f.queueReady = mod.ExportedFunction("proxy_on_queue_ready")
	go vm.loop()
	return vm, nil
}

// start runs _initialize, then creates the first root context: on_context_create,
// on_vm_start, on_configure.
func (vm *VM) start(ctx context.Context, pluginConfig []byte) error {
	if err := vm.enter(ctx); err != nil {
		return err
	}
	defer vm.leave()
	vm.logStart = vm.h.logs.next()
	if vm.fn.initialize != nil {
		if err := vm.call(vm.fn.initialize, "_initialize", 0); err != nil {
			return vm.startError(err)
		}
	}
	root := &rootContext{id: vm.newContextID(), config: pluginConfig}
	vm.roots[root.id] = root
	vm.root = root
	if err := vm.callCtx(root, vm.fn.contextCreate, "proxy_on_context_create", root.id, 0); err != nil {
		return vm.startError(err)
	}
	if ok, err := vm.vmStart(root); err != nil {
		return vm.startError(err)
	} else if !ok {
		return vm.startError(errVMStartFalse)
	}
	if ok, err := vm.configure(root); err != nil {
		return vm.startError(err)
	} else if !ok {
		return vm.startError(errors.New("proxy_on_configure returned false (the plugin rejected its configuration)"))
	}
	return nil
}

var errVMStartFalse = errors.New("proxy_on_vm_start returned false (the plugin rejected its VM configuration)")

// vmStart runs proxy_on_vm_start on root. proxy-wasm-cpp-host runs it on
// every new root context (ContextBase::onStart), so on a configuration-only
// update too, not only when the VM starts.
func (vm *VM) vmStart(root *rootContext) (bool, error) {
	if vm.fn.vmStart == nil {
		return true, nil
	}
	vm.stack[0], vm.stack[1] = uint64(root.id), uint64(len(vm.h.cfg.VMConfig))
	if err := vm.callRoot(root, vm.fn.vmStart, "proxy_on_vm_start", 2); err != nil {
		return false, err
	}
	return uint32(vm.stack[0]) != 0, nil
}

// configure runs proxy_on_configure on root with root.config.
func (vm *VM) configure(root *rootContext) (bool, error) {
	if vm.fn.configure == nil {
		return true, nil
	}
	vm.stack[0], vm.stack[1] = uint64(root.id), uint64(len(root.config))
	vm.beginCallback(root, nil, root.id)
	vm.cur.configuring, vm.cur.pluginConfig = true, root.config
	if err := vm.call(vm.fn.configure, "proxy_on_configure", 2); err != nil {
		vm.cur = callState{}
		return false, err
	}
	ok := uint32(vm.stack[0]) != 0
	return ok, vm.endCallback()
}

func (vm *VM) startError(err error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "wasmhost: vm %d failed to start: %v", vm.id, err)
	var trap *TrapError
	if errors.As(err, &trap) {
		b.Reset()
		fmt.Fprintf(&b, "wasmhost: vm %d failed to start: %v", vm.id, trap)
	}
	logs := vm.h.logs.sinceVM(vm.logStart, vm.id)
	var shown []LogEntry
	for _, l := range logs {
		if l.Level >= LogLevelWarn {
			shown = append(shown, l)
		}
	}
	if len(shown) == 0 && len(logs) > 0 {
		shown = logs[max(0, len(logs)-5):]
	}
	if len(shown) > 0 {
		b.WriteString("\nguest logs:")
		for _, l := range shown {
			fmt.Fprintf(&b, "\n  [%s] %s", l.Level, l.Message)
		}
	}
	if trap != nil {
		return &startError{msg: b.String(), trap: trap}
	}
	return errors.New(b.String())
}

type startError struct {
	msg  string
	trap *TrapError
}

func (e *startError) Error() string { return e.msg }
func (e *startError) Unwrap() error { return e.trap }

// ID returns the VM's index in Host.VMs (-1 for the canary).
func (vm *VM) ID() int { return vm.id }

// Err returns the trap that broke the VM, or nil.
func (vm *VM) Err() error {
	if t, _ := vm.errV.Load().(*TrapError); t != nil {
		return &brokenError{trap: t}
	}
	return nil
}

func (vm *VM) newContextID() uint32 {
	for {
		id := vm.nextContextID
		vm.nextContextID++
		if id == 0 || vm.roots[id] != nil || vm.streams[id] != nil {
			continue
		}
		return id
	}
}

// HostCalls is how many times the guest has called the proxy-wasm function
// name (proxy_get_header_map_pairs, ...) on this VM: what a request costs
// in host calls, for tests. It waits for the VM to be idle.
func (vm *VM) HostCalls(name string) uint64 {
	vm.sem <- struct{}{}
	defer func() { <-vm.sem }()
	for i, f := range hostFuncs {
		if f.name == name {
			return vm.hostCalls[i]
		}
	}
	return 0
}

// enter acquires the VM for guest execution.
func (vm *VM) enter(ctx context.Context) error {
	select {
	case vm.sem <- struct{}{}:
	default:
		select {
		case vm.sem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("wasmhost: vm %d: %w", vm.id, ctx.Err())
		}
	}
	if vm.closed {
		<-vm.sem
		return ErrClosed
	}
	if vm.broken != nil {
		<-vm.sem
		return &brokenError{trap: vm.broken}
	}
	return nil
}

// leave releases the VM, then hands newly dispatched HTTP calls to the
// handler (outside the VM, so a handler may answer synchronously).
func (vm *VM) leave() {
	var out []*HTTPCall
	if len(vm.outbox) > 0 {
		out = vm.outbox
		vm.outbox = nil
	}
	<-vm.sem
	for _, c := range out {
		vm.h.cfg.HTTPCalls.HandleHTTPCall(c)
	}
}

// call runs an exported function with nargs arguments already in vm.stack.
// It is the only place guest code is entered (besides malloc), and turns
// every failure into a TrapError that breaks the VM.
func (vm *VM) call(fn api.Function, name string, nargs int) error {
	err := fn.CallWithStack(vm.ctx, vm.stack[:max(nargs, 1)])
	if err != nil {
		return vm.trap(name, err)
	}
	return nil
}

// trap marks the VM broken.
func (vm *VM) trap(name string, err error) *TrapError {
	if vm.broken != nil {
		return vm.broken
	}
	t := &TrapError{VM: vm.id, Callback: name, Err: describeTrap(err), Stderr: vm.stderr.String()}
	vm.broken = t
	vm.errV.Store(t)
	vm.nextDue.Store(math.MaxInt64)
	for _, s := range vm.streams {
		s.settle(settleError, &brokenError{trap: t})
	}
	modules.Delete(vm.mod)
	for _, c := range vm.calls {
		c.cancel(&brokenError{trap: t})
	}
	vm.mod.Close(context.Background())
	return t
}

func describeTrap(err error) error {
	var merr *mallocError
	if errors.As(err, &merr) {
		return err
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("the guest exited with code %d (a Go guest exits with code 2 when it panics; see its stderr): %w",
			exit.ExitCode(), err)
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "wasm error:"):
		return err
	case strings.Contains(msg, "(recovered by wazero)"):
		return fmt.Errorf("a host function panicked while the guest called it: %w", err)
	}
	return err
}

// beginCallback resets the per-callback state for a callback on context id.
func (vm *VM) beginCallback(root *rootContext, s *Stream, id uint32) {
	vm.cur = callState{effective: id, stream: s, root: root}
}

// endCallback clears per-callback state and applies what the guest asked
// for during it (local replies, continue_stream, proxy_done), which in
// Envoy also takes effect after the callback returns.
func (vm *VM) endCallback() error {
	vm.cur = callState{}
	for vm.touchedHead < len(vm.touched) || len(vm.retire) > 0 {
		if vm.touchedHead < len(vm.touched) {
			s := vm.touched[vm.touchedHead]
			vm.touched[vm.touchedHead] = nil
			vm.touchedHead++
			s.touched = false
			if err := s.applyDeferred(); err != nil {
				vm.touched, vm.touchedHead, vm.retire = vm.touched[:0], 0, nil
				return err
			}
			continue
		}
		r := vm.retire[0]
		vm.retire = vm.retire[1:]
		if err := vm.deleteRoot(r); err != nil {
			vm.touched, vm.touchedHead, vm.retire = vm.touched[:0], 0, nil
			return err
		}
	}
	vm.touched, vm.touchedHead = vm.touched[:0], 0
	return nil
}

// callRoot runs fn (args in vm.stack) as a callback on a root context.
func (vm *VM) callRoot(root *rootContext, fn api.Function, name string, nargs int) error {
	vm.beginCallback(root, nil, root.id)
	if err := vm.call(fn, name, nargs); err != nil {
		vm.cur = callState{}
		return err
	}
	return vm.endCallbackKeepingResult()
}

// endCallbackKeepingResult ends a callback and keeps its result in
// vm.stack[0], where the caller reads it: ending the callback may call the
// guest again (the deferred actions of streams it resumed or answered, say
// an on_done that replied to a waiting stream), which reuses vm.stack.
func (vm *VM) endCallbackKeepingResult() error {
	result := vm.stack[0]
	err := vm.endCallback()
	vm.stack[0] = result
	return err
}

// callCtx runs a two-argument callback (context create) on a root context.
func (vm *VM) callCtx(root *rootContext, fn api.Function, name string, a, b uint32) error {
	vm.stack[0], vm.stack[1] = uint64(a), uint64(b)
	return vm.callRoot(root, fn, name, 2)
}

// callStream runs fn (args in vm.stack) as a callback on stream s.
func (vm *VM) callStream(s *Stream, fn api.Function, name string, nargs int) error {
	vm.beginCallback(s.root, s, s.id)
	if err := vm.call(fn, name, nargs); err != nil {
		vm.cur = callState{}
		return err
	}
	return vm.endCallbackKeepingResult()
}

// malloc allocates size bytes in the guest (its malloc export, else
// proxy_on_memory_allocate, as Envoy chooses). A
// failure here is fatal for the callback: it panics with the error, which
// wazero turns into the callback's error (and so a TrapError).
func (vm *VM) malloc(size uint32) uint32 {
	vm.mstack[0] = uint64(size)
	if err := vm.fn.malloc.CallWithStack(vm.ctx, vm.mstack[:]); err != nil {
		panic(&mallocError{size: size, fn: vm.allocator, err: err})
	}
	ptr := uint32(vm.mstack[0])
	if ptr == 0 {
		panic(&mallocError{size: size, fn: vm.allocator, err: errors.New("it returned 0")})
	}
	return ptr
}

// mallocError is the panic value of a failed guest allocation.
type mallocError struct {
	size uint32
	fn   string // the export called
	err  error
}

func (e *mallocError) Error() string {
	return fmt.Sprintf("the guest failed to allocate %d bytes (%s): %v", e.size, e.fn, e.err)
}

func (e *mallocError) Unwrap() error { return e.err }

// tailBuffer keeps the last max bytes written (the guest's stdout/stderr).
type tailBuffer struct {
	mu     sync.Mutex
	buf    []byte
	max    int
	echo   interface{ Write([]byte) (int, error) }
	prefix string
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	echo := t.echo
	t.mu.Unlock()
	if echo != nil {
		echo.Write([]byte(t.prefix + string(p)))
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// modules maps module instances to VMs, for host functions called with a
// context that is not a VM's (which the host never does).
var modules sync.Map // api.Module -> *VM

func registerModule(m api.Module, vm *VM) { modules.Store(m, vm) }
