package wasmhost

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestTrapInRequestHeaders(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), VMs: 2})
	_, err := h.VM(1).HTTP(context.Background(), &Request{Headers: []Header{{"x-probe", "trap"}}})
	var trap *TrapError
	if !errors.As(err, &trap) {
		t.Fatalf("err = %v, want a *TrapError", err)
	}
	if trap.VM != 1 || trap.Callback != "proxy_on_request_headers" {
		t.Fatalf("trap = VM %d callback %q, want VM 1 proxy_on_request_headers", trap.VM, trap.Callback)
	}
	if !strings.Contains(trap.Stderr, "probe trap") || !strings.Contains(err.Error(), "vm 1") {
		t.Fatalf("the error does not carry the guest's panic: %v", err)
	}
	// The VM is broken from now on; later calls name it.
	_, err = h.VM(1).HTTP(context.Background(), &Request{})
	if err == nil || !strings.Contains(err.Error(), "vm 1") || !errors.As(err, &trap) {
		t.Fatalf("call on a broken VM: %v", err)
	}
	if h.VM(1).Err() == nil {
		t.Fatal("VM.Err is nil after a trap")
	}
	if err := h.VM(1).Tick(context.Background()); err == nil {
		t.Fatal("Tick on a broken VM succeeded")
	}
	if err := h.Tick(context.Background()); err == nil || !strings.Contains(err.Error(), "vm 1") {
		t.Fatalf("Host.Tick with a broken VM: %v", err)
	}
	// The other VM still works.
	if got := one(t, h.VM(0), "ctx"); got == "" {
		t.Fatal("vm 0 broken too")
	}
}

func TestTrapInOtherCallbacks(t *testing.T) {
	cases := []struct {
		name, header, callback string
	}{
		{"response", "x-probe-resp", "proxy_on_response_headers"},
		{"log", "x-probe-log", "proxy_on_log"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t, Config{Clock: NewManualClock(t0)})
			_, err := h.VM(0).HTTP(context.Background(), &Request{Headers: []Header{{c.header, "trap"}}})
			var trap *TrapError
			if !errors.As(err, &trap) || trap.Callback != c.callback || trap.VM != 0 {
				t.Fatalf("err = %v, want a trap in %s", err, c.callback)
			}
		})
	}
}

func TestTrapInTick(t *testing.T) {
	clock := NewManualClock(t0)
	h := newHost(t, Config{Clock: clock, PluginConfig: []byte("tick=10 trap-tick")})
	clock.Advance(10 * 1e6)
	err := h.Tick(context.Background())
	var trap *TrapError
	if !errors.As(err, &trap) || trap.Callback != "proxy_on_tick" {
		t.Fatalf("err = %v, want a trap in proxy_on_tick", err)
	}
}

func TestTrapAtStartup(t *testing.T) {
	_, err := New(context.Background(), Config{Wasm: probeWasm(t), VMs: 2, PluginConfig: []byte("trap-start")})
	var trap *TrapError
	if !errors.As(err, &trap) || trap.VM != 0 || trap.Callback != "proxy_on_configure" {
		t.Fatalf("err = %v, want a trap of vm 0 in proxy_on_configure", err)
	}
	if !strings.Contains(err.Error(), "probe trap in on_configure") {
		t.Fatalf("the error lacks the guest's panic message: %v", err)
	}
}

func TestRejectAtStartup(t *testing.T) {
	_, err := New(context.Background(), Config{Wasm: probeWasm(t), PluginConfig: []byte("reject")})
	if err == nil || !strings.Contains(err.Error(), "vm 0") || !strings.Contains(err.Error(), "proxy_on_configure returned false") ||
		!strings.Contains(err.Error(), `rejecting configuration "reject"`) {
		t.Fatalf("err = %v, want the VM, the callback and the guest's error log", err)
	}
	_, err = New(context.Background(), Config{Wasm: probeWasm(t), VMConfig: []byte("vm-reject")})
	if err == nil || !strings.Contains(err.Error(), "proxy_on_vm_start returned false") {
		t.Fatalf("vm config rejection: %v", err)
	}
}

// TestHostFunctionPanic: a host function that panics (here a foreign
// function) fails the callback with an error and breaks the VM; the process
// survives.
func TestHostFunctionPanic(t *testing.T) {
	h := newHost(t, Config{Clock: NewManualClock(t0), ForeignFunctions: map[string]func([]byte) ([]byte, error){
		"boom": func([]byte) ([]byte, error) { panic("host bug") },
		"echo": func(p []byte) ([]byte, error) { return append([]byte("echo-"), p...), nil },
		"fail": func([]byte) ([]byte, error) { return nil, errors.New("no") },
	}})
	vm := h.VM(0)
	if got := results(t, vm, "foreign echo hi;foreign fail x;foreign nope x"); strings.Join(got, " ") != "ok:echo-hi err:InternalFailure err:NotFound" {
		t.Fatalf("foreign functions: %v", got)
	}
	_, err := vm.HTTP(context.Background(), &Request{Headers: []Header{{"x-probe", "foreign boom x"}}})
	var trap *TrapError
	if !errors.As(err, &trap) || !strings.Contains(err.Error(), "host bug") || !strings.Contains(err.Error(), "host function panicked") {
		t.Fatalf("err = %v, want a TrapError about the host panic", err)
	}
	if vm.Err() == nil {
		t.Fatal("VM not marked broken after a host panic")
	}
}

func TestNotAProxyWasmModule(t *testing.T) {
	_, err := New(context.Background(), Config{Wasm: []byte("\x00asm\x01\x00\x00\x00")})
	if err == nil || !strings.Contains(err.Error(), "not a proxy-wasm") {
		t.Fatalf("empty module: %v", err)
	}
	_, err = New(context.Background(), Config{Wasm: []byte("garbage")})
	if err == nil || !strings.Contains(err.Error(), "compiling") {
		t.Fatalf("garbage: %v", err)
	}
	_, err = New(context.Background(), Config{})
	if err == nil || !strings.Contains(err.Error(), "c-shared") {
		t.Fatalf("no wasm: %v", err)
	}
}
