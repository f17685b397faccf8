package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/shared/state"
)

// Forgetter is a Backend that can forget an identity's state: both of
// Sluice's backends.
type Forgetter interface {
	Forget(ctx context.Context, f redisgcra.Forget) error
}

// ErrCannotForget: the backend keeps no state the admin can forget.
var ErrCannotForget = errors.New("the fleet backend cannot forget an identity's state")

// Forget makes the backend forget identity's state under the global rule
// (a reset): its bucket, and its window or quota counts that may still be
// read. identity is the composite key, as an override names it; domain is
// the fleet's (policy.Fleet.Domain). The Envoys drop their lease pools of
// the identity when the configuration carrying the reset reaches them.
func (s *Server) Forget(ctx context.Context, domain, rule, identity string) error {
	fg, ok := s.backend.(Forgetter)
	if !ok {
		return ErrCannotForget
	}
	id := string(state.AppendSluiceID(nil, string(state.AppendIdentity(nil, identity))))
	f := redisgcra.Forget{Key: redisgcra.Key(domain, rule, id)}
	now := s.now()
	if w, ok := s.windowFor(item{rule: rule, id: id}, now); ok {
		f.WindowKeys = windowKeys(domain, rule, id, w, now)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return fg.Forget(ctx, f)
}

// windowKeys are the Redis keys of w's counts of id that may still be
// read at now: a rolling window's hash; the current window's counter and,
// for a sliding window, the previous one's.
func windowKeys(domain, rule, id string, w Window, now time.Time) []string {
	if w.rolling() {
		return []string{redisgcra.RollingKey(domain, rule, id)}
	}
	start, _ := w.Bounds(now)
	keys := []string{redisgcra.WindowKey(domain, rule, id, start.UnixMilli())}
	if w.Sliding {
		prev := start.Add(-time.Duration(w.Seconds) * time.Second)
		keys = append(keys, redisgcra.WindowKey(domain, rule, id, prev.UnixMilli()))
	}
	return keys
}
