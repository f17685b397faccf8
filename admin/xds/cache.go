package xds

import (
	"context"
	"fmt"
	"log/slog"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
)

// nackParkingCache stops the NACK loop of go-control-plane's snapshot
// cache (envoyproxy/go-control-plane#46, #962): a NACK carries the last
// version the node accepted, which differs from the snapshot's, so the
// cache answers it at once with the same rejected resource, which the node
// NACKs again, forever, as fast as the network allows.
//
// When a state-of-the-world request NACKs the version that is still the
// snapshot's (what this stream was last sent), the watch is created as if
// the node had that version: it then waits for the next Publish. The node
// keeps running its previous configuration meanwhile, exactly what Envoy
// does after a NACK. A NACK of an older version (the snapshot moved on
// since) is answered at once with the new one.
type nackParkingCache struct {
	cache.SnapshotCache
}

func (c nackParkingCache) CreateWatch(req *cache.Request, sub cache.Subscription, out chan cache.Response) (func(), error) {
	if req.GetErrorDetail() != nil {
		if snap, err := c.GetSnapshot(groupKey); err == nil {
			current := snap.GetVersion(req.GetTypeUrl())
			if sentOnly(sub.ReturnedResources(), current) {
				parked := proto.Clone(req).(*discovery.DiscoveryRequest)
				parked.VersionInfo = current
				req = parked
			}
		}
	}
	return c.SnapshotCache.CreateWatch(req, sub, out)
}

// sentOnly reports whether every resource the stream was sent came with
// version v (and there was at least one).
func sentOnly(returned map[string]string, v string) bool {
	if len(returned) == 0 {
		return false
	}
	for _, version := range returned {
		if version != v {
			return false
		}
	}
	return true
}

// cpLogger adapts slog to go-control-plane's logger. Its Info messages are
// per-request chatter (stale nonces), so they go to Debug.
type cpLogger struct{ log *slog.Logger }

func (l cpLogger) Debugf(format string, args ...any) { l.logf(slog.LevelDebug, format, args...) }
func (l cpLogger) Infof(format string, args ...any)  { l.logf(slog.LevelDebug, format, args...) }
func (l cpLogger) Warnf(format string, args ...any)  { l.logf(slog.LevelWarn, format, args...) }
func (l cpLogger) Errorf(format string, args ...any) { l.logf(slog.LevelError, format, args...) }

func (l cpLogger) logf(level slog.Level, format string, args ...any) {
	ctx := context.Background()
	if l.log.Enabled(ctx, level) {
		l.log.Log(ctx, level, fmt.Sprintf(format, args...))
	}
}
