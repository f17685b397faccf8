package envoyconfig

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// TestPluginImportsOnlyWhatEnvoyProvides checks the module `make build`
// writes to bin/ratelimit.wasm (same package, same flags).
func TestPluginImportsOnlyWhatEnvoyProvides(t *testing.T) {
	wasm := wasmtest.Build(t, "./plugin")
	if err := CheckImports(context.Background(), wasm); err != nil {
		t.Fatalf("bin/ratelimit.wasm would not load in Envoy >= 1.33:\n%v", err)
	}
}

func TestCheckImportsNamesWhatEnvoyLacks(t *testing.T) {
	i32, i64 := byte(0x7f), byte(0x7e)
	for _, tc := range []struct {
		name    string
		mod     testModule
		want    []string // in the error
		notWant []string
	}{
		{
			name: "missing functions and a bad signature",
			mod: testModule{
				abi: "0_2_0",
				imports: []testImport{
					{"wasi_snapshot_preview1", "fd_write", []byte{i32, i32, i32, i32}, []byte{i32}},       // fine
					{"wasi_snapshot_preview1", "fd_pwrite", []byte{i32, i32, i32, i64, i32}, []byte{i32}}, // not in Envoy
					{"wasi_snapshot_preview1", "clock_time_get", []byte{i32}, []byte{i32}},                // wrong signature
					{"env", "proxy_get_log_level", []byte{i32}, []byte{i32}},                              // ABI 0.2.1 only
					{"env", "proxy_log", []byte{i32, i32, i32}, []byte{i32}},                              // fine
					{"env", "proxy_make_coffee", nil, []byte{i32}},                                        // no such thing
					{"gojs", "runtime.wasmExit", []byte{i32}, nil},                                        // GOOS=js module
				},
			},
			want:    []string{"wasi_snapshot_preview1.fd_pwrite", "clock_time_get with signature", "env.proxy_get_log_level", "env.proxy_make_coffee", `no module "gojs"`},
			notWant: []string{"fd_write", "proxy_log"},
		},
		{
			name: "ABI 0.2.1 has get_log_level",
			mod: testModule{abi: "0_2_1", imports: []testImport{
				{"env", "proxy_get_log_level", []byte{i32}, []byte{i32}},
				{"wasi_snapshot_preview1", "poll_oneoff", []byte{i32, i32, i32, i32}, []byte{i32}},
			}},
		},
		{
			name: "no ABI version, no allocator",
			mod:  testModule{noMalloc: true},
			want: []string{"ABI version", "malloc"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckImports(context.Background(), tc.mod.encode())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			t.Logf("%v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error mentions %q, which Envoy provides:\n%v", w, err)
				}
			}
		})
	}
}

// testModule assembles a minimal wasm module: the given function imports,
// plus exported _initialize, malloc and proxy_abi_version_<abi>.
type testModule struct {
	abi      string // "" = no ABI export
	noMalloc bool
	imports  []testImport
}

type testImport struct {
	module, name    string
	params, results []byte // value types: 0x7f i32, 0x7e i64
}

func (m testModule) encode() []byte {
	vec := func(items ...[]byte) []byte {
		out := uleb(uint32(len(items)))
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	name := func(s string) []byte { return append(uleb(uint32(len(s))), s...) }
	funcType := func(params, results []byte) []byte {
		t := []byte{0x60}
		t = append(t, uleb(uint32(len(params)))...)
		t = append(t, params...)
		t = append(t, uleb(uint32(len(results)))...)
		return append(t, results...)
	}
	section := func(id byte, body []byte) []byte {
		return append(append([]byte{id}, uleb(uint32(len(body)))...), body...)
	}

	var types, imports [][]byte
	for _, im := range m.imports {
		imports = append(imports, append(append(name(im.module), name(im.name)...), 0x00, byte(len(types))))
		types = append(types, funcType(im.params, im.results))
	}
	// Local functions: type voidT for _initialize and the ABI marker,
	// mallocT for malloc.
	voidT, mallocT := byte(len(types)), byte(len(types)+1)
	types = append(types, funcType(nil, nil), funcType([]byte{0x7f}, []byte{0x7f}))

	type local struct {
		export string
		typ    byte
		body   []byte
	}
	locals := []local{{"_initialize", voidT, []byte{0x00, 0x0b}}}
	if !m.noMalloc {
		locals = append(locals, local{"malloc", mallocT, []byte{0x00, 0x20, 0x00, 0x0b}}) // local.get 0
	}
	if m.abi != "" {
		locals = append(locals, local{"proxy_abi_version_" + m.abi, voidT, []byte{0x00, 0x0b}})
	}
	var funcs, exports, codes [][]byte
	for i, l := range locals {
		funcs = append(funcs, []byte{l.typ})
		exports = append(exports, append(name(l.export), 0x00, byte(len(m.imports)+i)))
		codes = append(codes, append(uleb(uint32(len(l.body))), l.body...))
	}

	out := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	out = append(out, section(1, vec(types...))...)
	out = append(out, section(2, vec(imports...))...)
	out = append(out, section(3, vec(funcs...))...)
	out = append(out, section(7, vec(exports...))...)
	out = append(out, section(10, vec(codes...))...)
	return out
}

func uleb(v uint32) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}
