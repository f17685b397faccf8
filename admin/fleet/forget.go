package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/shared/state"
)

// Forgetter is a Backend that can forget an identity's state, or every
// identity's of a rule: both of Sluice's backends.
type Forgetter interface {
	Forget(ctx context.Context, f redisgcra.Forget) error
	// ForgetRule deletes every key starting with prefix
	// (redisgcra.RulePrefix) and says how many it deleted.
	ForgetRule(ctx context.Context, prefix string) (int64, error)
}

// ForgetRuleTimeout bounds ForgetRule: Redis is scanned whole (on every
// master of a Cluster) for the rule's keys, PostgreSQL deletes a row per
// identity, so it takes far longer than one rate limit call.
const ForgetRuleTimeout = 30 * time.Second

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

// ForgetRule makes the backend forget the state of every identity of the
// global rule (a reset of the whole rule): their buckets, window and
// quota counts and blocks, within ForgetRuleTimeout. Identities that
// call while it runs may keep what they took meanwhile. domain is the
// fleet's (policy.Fleet.Domain); other rules and domains keep theirs.
func (s *Server) ForgetRule(ctx context.Context, domain, rule string) error {
	fg, ok := s.backend.(Forgetter)
	if !ok {
		return ErrCannotForget
	}
	ctx, cancel := context.WithTimeout(ctx, ForgetRuleTimeout)
	defer cancel()
	start := time.Now()
	n, err := fg.ForgetRule(ctx, redisgcra.RulePrefix(domain, rule))
	if err != nil {
		s.log.Warn("forgetting every identity of a global rule failed", "domain", domain, "rule", rule, "deleted", n, "err", err)
		return err
	}
	s.log.Info("forgot every identity of a global rule", "domain", domain, "rule", rule, "deleted", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
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
