package telemetry

import (
	"context"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/admin/policies"
)

// ConfigHash returns FNV-1a 64 of a plugin configuration as 16 lower-case
// hex digits: the config_hash a plugin reports when Envoy gave it exactly
// these bytes. admin/xds pushes a version's JSON (policies.Version.JSON)
// unchanged as the filter's configuration (a StringValue), so the hash of
// a version's JSON is the hash the plugins running it report.
func ConfigHash(config []byte) string {
	h := fnv.New64a()
	h.Write(config)
	return FormatHash(h.Sum64())
}

// VersionSource lists policy versions (admin/policies.Service).
type VersionSource interface {
	List(ctx context.Context, before int64, limit int) (policies.Page, error)
}

// VersionIndex maps configuration hashes to policy versions. It is filled
// by Load at start, by Add (or the Publisher wrapper) for each new version,
// and, when a hash is not found, by an incremental reload in the background
// (at most every RefreshEvery), which picks up versions saved by another
// admin process sharing the database. Safe for concurrent use.
type VersionIndex struct {
	src VersionSource
	log *slog.Logger

	mu          sync.RWMutex
	byHash      map[string]int64 // the newest version with that configuration
	loaded      int64            // Load has indexed every version up to this one
	lastRefresh time.Time
	refreshing  atomic.Bool
}

// RefreshEvery bounds how often a lookup miss reloads the versions.
const RefreshEvery = 30 * time.Second

// NewVersionIndex returns an empty index over src (nil: only Add fills it).
func NewVersionIndex(src VersionSource, logger *slog.Logger) *VersionIndex {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &VersionIndex{src: src, log: logger, byHash: map[string]int64{}}
}

// SetSource sets the source Load reads (when it is built after the index,
// as the policy service that publishes through Publisher is).
func (x *VersionIndex) SetSource(src VersionSource) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.src = src
}

// Add indexes version number with its configuration.
func (x *VersionIndex) Add(number int64, config []byte) {
	h := ConfigHash(config)
	x.mu.Lock()
	defer x.mu.Unlock()
	if number > x.byHash[h] {
		x.byHash[h] = number
	}
}

// Load indexes every version newer than those of the previous Load.
func (x *VersionIndex) Load(ctx context.Context) error {
	x.mu.RLock()
	src, known := x.src, x.loaded
	x.mu.RUnlock()
	if src == nil {
		return nil
	}
	var before, newest int64
	defer func() {
		x.mu.Lock()
		x.loaded = max(x.loaded, newest)
		x.mu.Unlock()
	}()
	for {
		pg, err := src.List(ctx, before, policies.MaxPage)
		if err != nil {
			newest = 0 // incomplete: the next Load starts over
			return err
		}
		for _, v := range pg.Versions {
			if v.Number <= known {
				return nil
			}
			newest = max(newest, v.Number)
			x.Add(v.Number, v.JSON)
		}
		if pg.NextBefore == 0 {
			return nil
		}
		before = pg.NextBefore
	}
}

// Lookup returns the newest version whose configuration has the hash.
func (x *VersionIndex) Lookup(hash string) (int64, bool) {
	x.mu.RLock()
	v, ok := x.byHash[hash]
	stale := !ok && x.src != nil && time.Since(x.lastRefresh) >= RefreshEvery
	x.mu.RUnlock()
	if stale && x.refreshing.CompareAndSwap(false, true) {
		x.mu.Lock()
		x.lastRefresh = time.Now()
		x.mu.Unlock()
		go func() {
			defer x.refreshing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := x.Load(ctx); err != nil {
				x.log.Warn("reloading policy versions for config hashes failed", "err", err)
			}
		}()
	}
	return v, ok
}

// Publisher returns a policies.Publisher that indexes every version it
// publishes, then hands it to next (which may be nil).
func (x *VersionIndex) Publisher(next policies.Publisher) policies.Publisher {
	return indexingPublisher{x, next}
}

type indexingPublisher struct {
	x    *VersionIndex
	next policies.Publisher
}

func (p indexingPublisher) Publish(ctx context.Context, v policies.Version) error {
	p.x.Add(v.Number, v.JSON)
	if p.next == nil {
		return nil
	}
	return p.next.Publish(ctx, v)
}
