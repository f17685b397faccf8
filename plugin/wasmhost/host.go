package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Config configures a Host. Only Wasm is required.
type Config struct {
	Wasm         []byte            // module bytes (required)
	PluginConfig []byte            // the proxy_on_configure buffer (Envoy: the filter's `configuration`)
	VMConfig     []byte            // the proxy_on_vm_start buffer (Envoy: vm_config.configuration)
	VMs          int               // number of worker VMs (default 1), like Envoy's worker threads
	Clock        Clock             // default SystemClock()
	Env          map[string]string // WASI environment (Envoy: vm_config.environment_variables), e.g. GOGC
	CacheDir     string            // wazero compilation cache directory ("" = in-memory cache shared by the process)
	RootID       string            // root_id (property plugin_root_id)
	VMID         string            // vm_id (property plugin_vm_id; shared queue namespace)
	HTTPCalls    HTTPCallHandler   // answers dispatch_http_call; nil = calls wait in PendingCalls
	LogWriter    io.Writer         // optional: guest logs (and guest stderr) are also written here

	// Added beyond contract section A.

	// PluginName is the property plugin_name (Envoy: the filter config's name).
	PluginName string
	// NodeID is the property node.id (default "wasmhost").
	NodeID string
	// Properties are host-wide property values (dotted paths), consulted
	// after the per-request Properties and before the built-in defaults.
	Properties Properties
	// Clusters, when non-nil, lists the clusters dispatch_http_call may name;
	// another name gets BadArgument, as in Envoy when the cluster does not
	// exist. nil accepts any non-empty name.
	Clusters []string
	// ForeignFunctions answer proxy_call_foreign_function by name; an unknown
	// name gets NotFound (Envoy's answer). A function's error gives
	// InternalFailure to the guest.
	ForeignFunctions map[string]func(param []byte) ([]byte, error)
	// SharedData, when non-nil, is used instead of a new store (to let two
	// Hosts share one vm_id's data, as Envoy does across config updates).
	SharedData *SharedData
	// Canary makes New and Reconfigure first start the configuration in a
	// throw-away extra VM (VM id -1) sharing the same SharedData, like
	// Envoy's canary VM, and fail without touching the workers if it rejects
	// the configuration or traps.
	Canary bool
	// LogWriterLevel is the least level echoed to LogWriter (default Trace).
	LogWriterLevel LogLevel
	// LogFunc, when non-nil, receives every guest log line with its level
	// (the development gateway maps the levels onto its own logger).
	LogFunc func(LogEntry)
	// MaxLogs bounds the captured logs (oldest dropped); default 100000.
	MaxLogs int
}

// Host runs Config.VMs instances (VMs) of one proxy-wasm module in one
// wazero runtime, the way Envoy runs one VM per worker thread. All VMs share
// one SharedData, one set of metrics (by name) and one Clock.
type Host struct {
	cfg     Config
	clock   Clock
	clocks  *clocks
	rt      wazero.Runtime
	mod     wazero.CompiledModule
	shared  *SharedData
	vms     []*VM
	queues  sharedQueues
	metrics metricRegistry
	logs    logStore
	calls   callRegistry

	clusters map[string]bool
	nameSeq  atomic.Int64 // module instance names
	tickWake chan struct{}

	closeMu   sync.Mutex
	closed    atomic.Bool
	tickerWG  sync.WaitGroup
	tickerCtl sync.Mutex
	stopTick  []context.CancelFunc
}

// Shared compilation caches: one in-memory cache per process, one per
// directory. Compiling a Go module takes about a second; a cached compile
// (decode, validate, load machine code) takes tens of milliseconds.
var (
	cacheMu   sync.Mutex
	memCache  wazero.CompilationCache
	dirCaches = map[string]wazero.CompilationCache{}
)

func compilationCache(dir string) (wazero.CompilationCache, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if dir == "" {
		if memCache == nil {
			memCache = wazero.NewCompilationCache()
		}
		return memCache, nil
	}
	if c := dirCaches[dir]; c != nil {
		return c, nil
	}
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wasmhost: compilation cache in %s: %w", dir, err)
	}
	dirCaches[dir] = c
	return c, nil
}

// New compiles the module (once per process thanks to the compilation
// cache), instantiates cfg.VMs VMs sharing one SharedData and starts each as
// Envoy does: _initialize (the Go reactor's runtime and package init),
// proxy_on_context_create(root, 0), proxy_on_vm_start(root, len(VMConfig)),
// proxy_on_configure(root, len(PluginConfig)). It returns an error naming
// the VM, with the guest's warning and error logs, if a VM rejects its
// configuration or traps.
func New(ctx context.Context, cfg Config) (*Host, error) {
	if len(cfg.Wasm) == 0 {
		return nil, errors.New("wasmhost: Config.Wasm is empty; build the plugin with " +
			"GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared (or wasmtest.Build in tests)")
	}
	if cfg.VMs == 0 {
		cfg.VMs = 1
	}
	if cfg.VMs < 0 {
		return nil, fmt.Errorf("wasmhost: Config.VMs is %d; it must be >= 1", cfg.VMs)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "wasmhost"
	}
	if cfg.MaxLogs <= 0 {
		cfg.MaxLogs = 100000
	}
	cfg.PluginConfig = append([]byte(nil), cfg.PluginConfig...)
	cfg.VMConfig = append([]byte(nil), cfg.VMConfig...)
	cache, err := compilationCache(cfg.CacheDir)
	if err != nil {
		return nil, err
	}
	h := &Host{
		cfg:      cfg,
		clock:    cfg.Clock,
		clocks:   newClocks(cfg.Clock),
		shared:   cfg.SharedData,
		tickWake: make(chan struct{}, 1),
	}
	if h.shared == nil {
		h.shared = NewSharedData()
	}
	if cfg.Clusters != nil {
		h.clusters = make(map[string]bool, len(cfg.Clusters))
		for _, c := range cfg.Clusters {
			h.clusters[c] = true
		}
	}
	h.logs.max = cfg.MaxLogs
	h.queues.init()
	h.metrics.init()

	h.rt = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().
		WithCompilationCache(cache).
		WithCoreFeatures(api.CoreFeaturesV2))
	ok := false
	defer func() {
		if !ok {
			h.rt.Close(context.Background())
		}
	}()
	h.mod, err = h.rt.CompileModule(ctx, cfg.Wasm)
	if err != nil {
		return nil, fmt.Errorf("wasmhost: compiling the module: %w", err)
	}
	if err := checkExports(h.mod); err != nil {
		return nil, err
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, h.rt); err != nil {
		return nil, fmt.Errorf("wasmhost: instantiating WASI: %w", err)
	}
	if err := h.instantiateEnv(ctx); err != nil {
		return nil, err
	}
	if cfg.Canary {
		if err := h.runCanary(ctx, cfg.PluginConfig); err != nil {
			return nil, err
		}
	}
	for i := 0; i < cfg.VMs; i++ {
		vm, err := h.newVM(ctx, i)
		if err == nil {
			err = vm.start(ctx, cfg.PluginConfig)
		}
		if err != nil {
			if vm != nil {
				h.vms = append(h.vms, vm)
			}
			for _, v := range h.vms {
				v.stopLoop()
				modules.Delete(v.mod)
			}
			return nil, err
		}
		h.vms = append(h.vms, vm)
	}
	ok = true
	return h, nil
}

// runCanary starts a throw-away VM with pluginConfig and closes it.
func (h *Host) runCanary(ctx context.Context, pluginConfig []byte) error {
	vm, err := h.newVM(ctx, -1)
	if err != nil {
		return err
	}
	defer func() {
		vm.stopLoop()
		modules.Delete(vm.mod)
		vm.mod.Close(context.Background())
	}()
	if err := vm.start(ctx, pluginConfig); err != nil {
		return fmt.Errorf("canary: %w", err)
	}
	return nil
}

// Close stops the VMs and releases the runtime. Paused streams and pending
// HTTP calls fail with ErrClosed. It waits for a callback in progress to
// return (or ctx to end).
func (h *Host) Close(ctx context.Context) error {
	h.closeMu.Lock()
	defer h.closeMu.Unlock()
	if h.closed.Swap(true) {
		return nil
	}
	h.tickerCtl.Lock()
	for _, c := range h.stopTick {
		c()
	}
	h.stopTick = nil
	h.tickerCtl.Unlock()
	h.tickerWG.Wait()
	var errs []error
	for _, vm := range h.vms {
		if err := vm.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	h.calls.cancelAll()
	if err := h.rt.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// VMs returns the worker VMs.
func (h *Host) VMs() []*VM { return append([]*VM(nil), h.vms...) }

// VM returns worker VM i, or nil if there is none.
func (h *Host) VM(i int) *VM {
	if i < 0 || i >= len(h.vms) {
		return nil
	}
	return h.vms[i]
}

// SharedData returns the store shared by all VMs.
func (h *Host) SharedData() *SharedData { return h.shared }

// Clock returns the host's clock.
func (h *Host) Clock() Clock { return h.clock }

// Reconfigure applies a new plugin configuration like Envoy's config-only
// update: every VM gets a NEW root context (proxy_on_context_create +
// proxy_on_configure with pluginConfig); VMs, their memory and the shared
// data are kept. If any VM returns false (or traps), the update is rejected
// and the old root contexts stay in force (the new ones are retired). On
// success new streams use the new root contexts; each old one stays alive
// while streams created on it are in flight (as Envoy keeps the old filter
// configuration for them), then is retired: proxy_on_done, then
// proxy_on_delete once done (immediately if on_done returned true, else when
// the guest calls proxy_done), and its pending HTTP calls are cancelled.
func (h *Host) Reconfigure(ctx context.Context, pluginConfig []byte) error {
	if h.closed.Load() {
		return ErrClosed
	}
	if h.cfg.Canary {
		if err := h.runCanary(ctx, pluginConfig); err != nil {
			return fmt.Errorf("wasmhost: configuration rejected (old configuration stays in force): %w", err)
		}
	}
	cfg := append([]byte(nil), pluginConfig...)
	created := make([]*rootContext, len(h.vms))
	var failure error
	for i, vm := range h.vms {
		root, err := vm.configureNewRoot(ctx, cfg)
		created[i] = root
		if err != nil {
			failure = err
			break
		}
	}
	var errs []error
	for i, vm := range h.vms {
		if created[i] == nil {
			continue
		}
		if err := vm.swapRoot(ctx, created[i], failure == nil); err != nil {
			errs = append(errs, err)
		}
	}
	if failure != nil {
		return fmt.Errorf("wasmhost: configuration rejected (old configuration stays in force): %w",
			errors.Join(append([]error{failure}, errs...)...))
	}
	return errors.Join(errs...)
}

// Logs returns all captured guest logs (all VMs), oldest first.
func (h *Host) Logs() []LogEntry { return h.logs.since(0, LogLevelTrace) }

// LogsAtLeast returns the captured logs of level l or above.
func (h *Host) LogsAtLeast(l LogLevel) []LogEntry { return h.logs.since(0, l) }

// Metric returns the value of the counter or gauge the guest defined under
// name. Metrics are shared by name across VMs like Envoy stats, so this is
// the sum of all VMs' increments (a gauge set with record_metric holds the
// last value set by any VM).
func (h *Host) Metric(name string) (value uint64, ok bool) { return h.metrics.value(name) }

// Metrics returns all counters and gauges by name.
func (h *Host) Metrics() map[string]uint64 { return h.metrics.all() }

// Histogram returns what was recorded in the histogram name.
func (h *Host) Histogram(name string) (HistogramStats, bool) { return h.metrics.histogram(name) }

// Tick calls proxy_on_tick on every root context, of every VM, whose tick
// period has elapsed per the Clock (monotonic reading) since it was set or
// last ticked, and fails HTTP calls whose timeout has passed, VM 0 first,
// each VM's in the order they fell due. Like Envoy's timer it does not
// catch up: one Tick runs at most one on_tick per root context, and the
// next is due one period after it.
func (h *Host) Tick(ctx context.Context) error {
	var errs []error
	for _, vm := range h.vms {
		if err := vm.Tick(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StartTicker runs ticks in the background until ctx ends or the Host is
// closed: each VM's on_tick is queued to that VM's goroutine when due per
// the Clock. With a ManualClock, ticks fire after the clock is advanced
// (polled every few milliseconds of real time). Errors (a trapping on_tick)
// mark the VM broken; see VM.Err.
func (h *Host) StartTicker(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	h.tickerCtl.Lock()
	if h.closed.Load() {
		h.tickerCtl.Unlock()
		cancel()
		return
	}
	h.stopTick = append(h.stopTick, cancel)
	h.tickerWG.Add(1)
	h.tickerCtl.Unlock()
	go func() {
		defer h.tickerWG.Done()
		defer cancel()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			case <-h.tickWake:
			}
			now := h.clocks.nanotime()
			next := int64(math.MaxInt64)
			for _, vm := range h.vms {
				due := vm.nextDue.Load()
				if due <= now {
					vm.queueTick()
				} else if due < next {
					next = due
				}
			}
			wait := 50 * time.Millisecond
			if _, manual := h.clock.(*ManualClock); manual {
				wait = 2 * time.Millisecond
			} else if next != math.MaxInt64 {
				wait = min(wait, max(time.Duration(next-now), 100*time.Microsecond))
			}
			timer.Reset(wait)
		}
	}()
}

// wakeTicker tells a running ticker that a deadline changed.
func (h *Host) wakeTicker() {
	select {
	case h.tickWake <- struct{}{}:
	default:
	}
}

// PendingCalls returns the dispatched HTTP calls not answered yet, oldest
// first (with Config.HTTPCalls nil they wait here for Respond or Fail).
func (h *Host) PendingCalls() []*HTTPCall { return h.calls.pending() }

// Drain waits until every VM has run the asynchronous work (HTTP call
// responses, queue notifications, ticker ticks) queued before the call.
func (h *Host) Drain(ctx context.Context) error {
	var errs []error
	for _, vm := range h.vms {
		if err := vm.Drain(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkExports tells a module that is not a proxy-wasm reactor apart
// with a useful message.
func checkExports(m wazero.CompiledModule) error {
	names := m.ExportedFunctions()
	abi := false
	for name := range names {
		if strings.HasPrefix(name, "proxy_abi_version_0_2_") {
			abi = true
		}
	}
	var missing []string
	if !abi {
		missing = append(missing, "proxy_abi_version_0_2_x")
	}
	if names["malloc"] == nil && names["proxy_on_memory_allocate"] == nil {
		missing = append(missing, "proxy_on_memory_allocate (or malloc)")
	}
	if names["proxy_on_context_create"] == nil {
		missing = append(missing, "proxy_on_context_create")
	}
	if len(missing) > 0 {
		hint := ""
		if names["_start"] != nil {
			hint = " The module exports _start: it was built as a command; build it with -buildmode=c-shared."
		}
		//lint:ignore ST1005 the error says what to do, in sentences.
		return fmt.Errorf("wasmhost: not a proxy-wasm ABI 0.2 module: missing exports %s.%s "+
			"Build Go plugins with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared and register the VM context in init().",
			strings.Join(missing, ", "), hint)
	}
	return nil
}

// sortedKeys is used for deterministic output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
