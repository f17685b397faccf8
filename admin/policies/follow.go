package policies

import (
	"context"
	"time"
)

// FollowEvery is how often Follow looks for a version saved by another
// admin process: a save on one replica is pushed by all within about that.
const FollowEvery = 500 * time.Millisecond

// numberer is a store that reads the current version's number alone.
type numberer interface {
	CurrentNumber(ctx context.Context) (int64, error)
}

// Sync publishes the current version if it is newer than the last one
// this service published (another admin process sharing the database
// saved it), and the resets if another one added some (SyncResets). It
// reports whether it published.
func (s *Service) Sync(ctx context.Context) (bool, error) {
	published, err := s.syncVersion(ctx)
	if err != nil {
		return published, err
	}
	pushed, err := s.SyncResets(ctx)
	return published || pushed, err
}

func (s *Service) syncVersion(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	published := s.LastPublish().Version
	if n, ok := s.store.(numberer); ok {
		cur, err := n.CurrentNumber(ctx)
		if err != nil || cur <= published {
			return false, err
		}
	}
	cur, err := s.store.Current(ctx)
	if err != nil || cur.Number <= published {
		return false, err
	}
	s.log.Info("another admin saved a version", "version", cur.Number)
	return true, s.publish(ctx, fromStore(cur))
}

// Follow calls Sync every interval until ctx ends, logging its errors
// (the database unreachable: the replica keeps serving what it has).
func (s *Service) Follow(ctx context.Context, every time.Duration) {
	failing := false
	tick(ctx, every, func() {
		_, err := s.Sync(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			s.log.Warn("checking the database for versions and resets saved by other admins", "err", err)
			failing = true
		case err == nil && failing:
			s.log.Info("the database answers again")
			failing = false
		}
	})
}

// tick calls fn every interval until ctx ends.
func tick(ctx context.Context, every time.Duration, fn func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
