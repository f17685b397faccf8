package envoyconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// What Envoy >= 1.33 gives a wasm module, from proxy-wasm-cpp-host (which
// Envoy embeds): WasmBase::registerCallbacks in src/wasm.cc registers
//
//   - "env": pthread_equal, emscripten_notify_memory_growth, "proxy_" + each
//     of FOR_ALL_HOST_FUNCTIONS (include/proxy-wasm/exports.h), and the
//     ABI-specific functions for the ABI version the module exports;
//   - "wasi_snapshot_preview1" and "wasi_unstable": each of
//     FOR_ALL_WASI_FUNCTIONS, plus sched_yield, poll_oneoff and
//     fd_fdstat_set_flags, added by proxy-wasm-cpp-host #427 for modules
//     built by standard Go (the reason Envoy 1.33 is the floor).
//
// Not in this list: the rest of WASI preview 1 (proxy-wasm-cpp-host #533
// adds it, but Envoy releases do not ship it yet, envoyproxy/envoy#44526).
// A module importing anything else fails to link in Envoy.
var (
	envoyHostFunctions = []string{
		"log", "get_status", "set_property", "get_property", "send_local_response",
		"get_shared_data", "set_shared_data", "register_shared_queue", "resolve_shared_queue",
		"dequeue_shared_queue", "enqueue_shared_queue", "get_header_map_value",
		"add_header_map_value", "replace_header_map_value", "remove_header_map_value",
		"get_header_map_pairs", "set_header_map_pairs", "get_header_map_size",
		"get_buffer_status", "get_buffer_bytes", "set_buffer_bytes",
		"http_call", "grpc_call", "grpc_stream", "grpc_close", "grpc_cancel", "grpc_send",
		"set_tick_period_milliseconds", "get_current_time_nanoseconds",
		"define_metric", "increment_metric", "record_metric", "get_metric",
		"set_effective_context", "done", "call_foreign_function",
	}
	// envoyABIFunctions are registered only for modules exporting that
	// ABI version (proxy_abi_version_X_Y_Z).
	envoyABIFunctions = map[string][]string{
		"0_1_0": {"get_configuration", "continue_request", "continue_response", "clear_route_cache"},
		"0_2_0": {"continue_stream", "close_stream"},
		"0_2_1": {"continue_stream", "close_stream", "get_log_level"},
	}
	envoyEnvOthers = []string{"pthread_equal", "emscripten_notify_memory_growth"}
	envoyWASI      = []string{
		"fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get", "environ_get",
		"environ_sizes_get", "args_get", "args_sizes_get", "clock_time_get", "random_get",
		"proc_exit", "path_open", "fd_prestat_get", "fd_prestat_dir_name",
		// proxy-wasm-cpp-host #427 (Go's runtime imports them):
		"sched_yield", "poll_oneoff", "fd_fdstat_set_flags",
	}
)

// CheckImports reports every reason Envoy >= 1.33 would refuse to load the
// module: an imported function it does not provide (named), a WASI import
// whose signature differs from WASI preview 1's, an imported memory, a
// missing or unknown proxy-wasm ABI version, or a missing allocator.
func CheckImports(ctx context.Context, wasm []byte) error {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter()) // parse only: no need to compile
	defer rt.Close(ctx)
	mod, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return fmt.Errorf("not a valid wasm module: %w", err)
	}
	wasi, err := wasiSignatures(ctx, rt)
	if err != nil {
		return err
	}

	var errs []error
	exports := mod.ExportedFunctions()
	var abi string
	for name := range exports {
		if v, ok := strings.CutPrefix(name, "proxy_abi_version_"); ok {
			if abi != "" {
				errs = append(errs, fmt.Errorf("exports two proxy-wasm ABI versions (%s and %s)", abi, v))
			}
			abi = v
		}
	}
	if _, known := envoyABIFunctions[abi]; !known {
		errs = append(errs, fmt.Errorf("proxy-wasm ABI version %q: Envoy needs an export proxy_abi_version_0_2_1, _0_2_0 or _0_1_0", abi))
	}
	if exports["malloc"] == nil && exports["proxy_on_memory_allocate"] == nil {
		errs = append(errs, errors.New("exports neither malloc nor proxy_on_memory_allocate: Envoy cannot hand it data"))
	}
	if exports["_initialize"] == nil && exports["_start"] == nil {
		errs = append(errs, errors.New("exports neither _initialize (WASI reactor) nor _start"))
	}

	env := slices.Clone(envoyEnvOthers)
	for _, f := range envoyHostFunctions {
		env = append(env, "proxy_"+f)
	}
	for _, f := range envoyABIFunctions[abi] {
		env = append(env, "proxy_"+f)
	}
	seen := map[string]bool{}
	for _, def := range mod.ImportedFunctions() {
		module, name, _ := def.Import()
		what := module + "." + name
		if seen[what] {
			continue
		}
		seen[what] = true
		switch module {
		case "env":
			if !slices.Contains(env, name) {
				errs = append(errs, fmt.Errorf("imports %s, which Envoy does not provide (for proxy-wasm ABI %s)", what, abi))
			}
		case wasi_snapshot_preview1.ModuleName, "wasi_unstable":
			if !slices.Contains(envoyWASI, name) {
				errs = append(errs, fmt.Errorf("imports %s, which Envoy >= 1.33 does not provide", what))
				continue
			}
			if want, ok := wasi[name]; ok && module == wasi_snapshot_preview1.ModuleName && !sameSignature(def, want) {
				errs = append(errs, fmt.Errorf("imports %s with signature %s, but WASI defines %s", what, signature(def), signature(want)))
			}
		default:
			errs = append(errs, fmt.Errorf("imports %s: Envoy provides no module %q", what, module))
		}
	}
	for _, m := range mod.ImportedMemories() {
		module, name, _ := m.Import()
		errs = append(errs, fmt.Errorf("imports memory %s.%s: Envoy provides none", module, name))
	}
	return errors.Join(errs...)
}

// wasiSignatures returns WASI preview 1's functions as wazero defines them.
func wasiSignatures(ctx context.Context, rt wazero.Runtime) (map[string]api.FunctionDefinition, error) {
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, fmt.Errorf("WASI reference: %w", err)
	}
	return rt.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions(), nil
}

func sameSignature(a, b api.FunctionDefinition) bool {
	return slices.Equal(a.ParamTypes(), b.ParamTypes()) && slices.Equal(a.ResultTypes(), b.ResultTypes())
}

func signature(d api.FunctionDefinition) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(d.ParamTypes()) + ") -> (" + names(d.ResultTypes()) + ")"
}
