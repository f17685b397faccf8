package fleet

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// switchBackend fails every call while down is set, else grants.
type switchBackend struct {
	fakeBackend
	down bool
}

func (b *switchBackend) Run(ctx context.Context, ops []redisgcra.Op) ([]redisgcra.Outcome, error) {
	if b.down {
		return nil, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	}
	return b.fakeBackend.Run(ctx, ops)
}

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// TestBackendOutageIsLoggedOnceThenSummedUpThenRecovered: 200 failed calls
// over 15 s make two WARN lines (the first failure, then one summary after
// FailureLogInterval with the count), and the first answer after them one
// INFO line with the outage's length. Calls come every 75 ms: the 134th
// after the first is the first past 10 s.
func TestBackendOutageIsLoggedOnceThenSummedUpThenRecovered(t *testing.T) {
	var out lockedBuffer
	b := &switchBackend{down: true}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := NewServer(Options{Backend: b, Rules: &StaticRules{Limits: map[string]redisgcra.Limit{"api": {Rate: 10, Burst: 10}}},
		Logger: slog.New(slog.NewTextHandler(&out, nil)), Now: func() time.Time { return now }, BackendName: "redis 127.0.0.1:6379"})
	req := &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "A", 1, false)}}
	for i := range 200 {
		if _, err := s.ShouldRateLimit(context.Background(), req); err == nil {
			t.Fatalf("call %d answered with the backend down", i)
		}
		now = now.Add(75 * time.Millisecond)
	}
	b.down = false
	if _, err := s.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	lines := out.lines()
	want := []string{
		`level=WARN msg="fleet backend failed; the rate limit service answers UNAVAILABLE`,
		`level=WARN msg="fleet backend still failing" backend="redis 127.0.0.1:6379" down_for=10s failures_since_last_line=134 `,
		`level=INFO msg="fleet backend recovered" backend="redis 127.0.0.1:6379" down_for=15s failures=200`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d:\n%s\nwant it to contain\n%s", i, lines[i], w)
		}
	}
}
