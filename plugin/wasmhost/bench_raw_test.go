package wasmhost

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// BenchmarkRawWazeroEmptyStream is the same stream as BenchmarkEmptyStream
// driven directly through wazero, without the host: the reference the host's
// overhead is measured against.
func BenchmarkRawWazeroEmptyStream(b *testing.B) {
	ctx := context.Background()
	cache, err := compilationCache("")
	if err != nil {
		b.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	_, err = rt.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, st []uint64) { st[0] = 0 }),
			[]api.ValueType{i32}, []api.ValueType{i32}).Export("proxy_set_effective_context").Instantiate(ctx)
	if err != nil {
		b.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, emptyWasm(b), wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		b.Fatal(err)
	}
	st := make([]uint64, 8)
	call := func(name string, args ...uint64) {
		copy(st, args)
		if err := mod.ExportedFunction(name).CallWithStack(ctx, st); err != nil {
			b.Fatal(err)
		}
	}
	call("proxy_on_context_create", 1, 0)
	call("proxy_on_vm_start", 1, 0)
	call("proxy_on_configure", 1, 0)
	fns := map[string]api.Function{}
	for _, n := range []string{"proxy_on_context_create", "proxy_on_request_headers", "proxy_on_response_headers", "proxy_on_log", "proxy_on_done", "proxy_on_delete"} {
		fns[n] = mod.ExportedFunction(n)
	}
	create, reqH, respH, log, done, del := fns["proxy_on_context_create"], fns["proxy_on_request_headers"],
		fns["proxy_on_response_headers"], fns["proxy_on_log"], fns["proxy_on_done"], fns["proxy_on_delete"]
	id := uint64(2)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st[0], st[1] = id, 1
		create.CallWithStack(ctx, st)
		st[0], st[1], st[2] = id, 4, 1
		reqH.CallWithStack(ctx, st)
		st[0], st[1], st[2] = id, 1, 1
		respH.CallWithStack(ctx, st)
		st[0] = id
		log.CallWithStack(ctx, st)
		st[0] = id
		done.CallWithStack(ctx, st)
		st[0] = id
		del.CallWithStack(ctx, st)
		id++
	}
}
