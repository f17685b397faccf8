package scenario

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// DefaultStart is the clock's start when Options.Start is zero.
var DefaultStart = time.Unix(1_700_000_000, 0)

var (
	wasmFileOnce sync.Once
	wasmFile     string
	wasmFileErr  error
)

// PluginWasmPath returns a file holding the compiled filter (./plugin), for
// hosts that load a module from a path. It builds (or finds, with
// SLUICE_WASM_DIR) the module once per process.
func PluginWasmPath(tb testing.TB) string {
	tb.Helper()
	wasm := wasmtest.Build(tb, "./plugin")
	wasmFileOnce.Do(func() {
		sum := sha256.Sum256(wasm)
		p := filepath.Join(os.TempDir(), "sluice-scenario-"+hex.EncodeToString(sum[:8])+".wasm")
		if err := os.WriteFile(p+".tmp", wasm, 0o644); err != nil {
			wasmFileErr = err
			return
		}
		wasmFileErr = os.Rename(p+".tmp", p)
		wasmFile = p
	})
	if wasmFileErr != nil {
		tb.Fatalf("scenario: writing the compiled filter: %v", wasmFileErr)
	}
	return wasmFile
}

// Wasmhost starts scenarios under plugin/wasmhost, the wazero host, in
// process. Options.WasmPath "" means the compiled filter.
func Wasmhost() Starter {
	return func(tb testing.TB, o Options) (Host, error) {
		tb.Helper()
		var wasm []byte
		if o.WasmPath == "" {
			wasm = wasmtest.Build(tb, "./plugin")
		} else {
			b, err := os.ReadFile(o.WasmPath)
			if err != nil {
				return nil, err
			}
			wasm = b
		}
		start := o.Start
		if start.IsZero() {
			start = DefaultStart
		}
		clock := wasmhost.NewManualClock(start)
		h, err := wasmhost.New(context.Background(), wasmhost.Config{
			Wasm:         wasm,
			PluginConfig: o.Config,
			VMs:          max(o.VMs, 1),
			Clock:        clock,
			Env:          o.Env,
			NodeID:       o.NodeID,
			Clusters:     o.Clusters,
			CacheDir:     wasmtest.CacheDir(tb),
		})
		if err != nil {
			return nil, err
		}
		w := &wazeroHost{h: h, clock: clock}
		tb.Cleanup(func() { _ = w.Close() })
		return w, nil
	}
}

type wazeroHost struct {
	h     *wasmhost.Host
	clock *wasmhost.ManualClock
	once  sync.Once
}

func (w *wazeroHost) Name() string { return "wasmhost" }

func (w *wazeroHost) HTTP(vm int, r Request) (Response, error) {
	v := w.h.VM(vm)
	if v == nil {
		return Response{}, fmt.Errorf("wasmhost: no VM %d", vm)
	}
	req := &wasmhost.Request{
		Headers:              r.Headers,
		Properties:           wasmhost.Properties(r.Properties),
		ResponseHeaders:      r.ResponseHeaders,
		ResponseTrailers:     r.ResponseTrailers,
		ResponseBody:         r.ResponseBody,
		ResetAfterBodyChunks: r.ResetAfterBodyChunks,
		ResetAfterRequest:    r.ResetAfterRequest,
		HoldUpstream:         r.HoldUpstream,
	}
	res, err := v.HTTP(context.Background(), req)
	if err != nil {
		return Response{}, err
	}
	out := fromResult(res)
	if s, ok := out.Stream.(*wazeroStream); ok {
		s.up = req // what Complete answers
	}
	return out, nil
}

func (w *wazeroHost) HTTPMany(vm int, rs []Request) ([]Response, error) {
	out := make([]Response, 0, len(rs))
	for _, r := range rs {
		res, err := w.HTTP(vm, r)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

func fromResult(res *wasmhost.Result) Response {
	out := Response{
		Rejected:        res.Rejected,
		Status:          res.Status,
		UpstreamHeaders: res.UpstreamHeaders,
		ResponseHeaders: res.ResponseHeaders,
		ResponseBody:    res.ResponseBody,
		Paused:          res.Paused,
	}
	if res.Local != nil {
		out.LocalBody, out.LocalDetails = res.Local.Body, res.Local.Details
	}
	if res.Stream != nil {
		out.Stream = &wazeroStream{s: res.Stream}
	}
	return out
}

type wazeroStream struct {
	s  *wasmhost.Stream
	up *wasmhost.Request // the upstream's answer for Complete (headers, body, trailers)
}

func (s *wazeroStream) Settled() bool {
	select {
	case <-s.s.Settled():
		return true
	default:
		return false
	}
}

func (s *wazeroStream) Complete() (Response, error) {
	if !s.Settled() {
		return Response{}, errors.New("wasmhost: the stream is still paused")
	}
	up := s.up
	if up == nil {
		up = &wasmhost.Request{}
	}
	res, err := s.s.CompleteWith(context.Background(), up)
	if err != nil {
		return Response{}, err
	}
	return fromResult(res), nil
}

func (s *wazeroStream) Reset() error { return s.s.Reset() }

func (w *wazeroHost) Advance(d time.Duration) { w.clock.Advance(d) }

func (w *wazeroHost) Tick() error {
	ctx := context.Background()
	if err := w.h.Tick(ctx); err != nil {
		return err
	}
	return w.h.Drain(ctx)
}

func (w *wazeroHost) Reconfigure(config []byte) error {
	return w.h.Reconfigure(context.Background(), config)
}

func (w *wazeroHost) Metric(name string) (uint64, bool) { return w.h.Metric(name) }

func (w *wazeroHost) Logs() []string {
	entries := w.h.Logs()
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Message
	}
	return out
}

func (w *wazeroHost) SharedDataSize() (int, int, error) {
	sd := w.h.SharedData()
	return sd.Len(), sd.Bytes(), nil
}

func (w *wazeroHost) SharedGet(key string) ([]byte, bool, error) {
	v, _, st := w.h.SharedData().Get(key)
	return v, st == wasmhost.StatusOK, nil
}

func (w *wazeroHost) PendingCalls() ([]Call, error) {
	if err := w.h.Drain(context.Background()); err != nil {
		return nil, err
	}
	var out []Call
	for _, c := range w.h.PendingCalls() {
		out = append(out, Call{ID: callID(c), VM: c.VM, Cluster: c.Cluster, Headers: c.Headers, Body: c.Body})
	}
	return out, nil
}

func (w *wazeroHost) call(id uint32) (*wasmhost.HTTPCall, error) {
	for _, c := range w.h.PendingCalls() {
		if callID(c) == id {
			return c, nil
		}
	}
	return nil, fmt.Errorf("wasmhost: no pending call %d", id)
}

// callID makes a call id unique across VMs: wasmhost numbers callouts per VM.
func callID(c *wasmhost.HTTPCall) uint32 { return uint32(c.VM+1)<<24 | c.ID&0xffffff }

func (w *wazeroHost) Respond(id uint32, headers []Header, body []byte) error {
	c, err := w.call(id)
	if err != nil {
		return err
	}
	if err := c.Respond(headers, body); err != nil {
		return err
	}
	return c.Wait(context.Background())
}

func (w *wazeroHost) FailCall(id uint32) error {
	c, err := w.call(id)
	if err != nil {
		return err
	}
	if err := c.Fail(); err != nil {
		return err
	}
	return c.Wait(context.Background())
}

func (w *wazeroHost) Close() error {
	var err error
	w.once.Do(func() { err = w.h.Close(context.Background()) })
	return err
}
