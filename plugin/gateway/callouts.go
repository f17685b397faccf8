package main

import (
	"context"
	"log/slog"
	"net/url"
	"strings"

	"github.com/sluice-rl/sluice/plugin/wasmhost/netcall"
)

// Callouts answers the plugin's dispatch_http_call (its telemetry reports,
// its fleet-mode rate limit calls) for real, the way Envoy does through a
// cluster: see plugin/wasmhost/netcall (http://, https:// and h2c://
// clusters; response trailers reach the plugin).
type Callouts = netcall.Client

// NewCallouts returns a handler for the given clusters (name to base URL).
// ctx ends in-flight calls (they are then failed).
func NewCallouts(ctx context.Context, clusters map[string]*url.URL, logger *slog.Logger) *Callouts {
	return netcall.New(ctx, clusters, logger)
}

// parseClusters parses "name=url" specs (from -cluster flags and
// SLUICE_CLUSTERS, "a=url,b=url").
func parseClusters(specs []string) (map[string]*url.URL, error) { return netcall.ParseClusters(specs) }

// listFlag collects a repeatable flag (-cluster, -vm-env); its specs start
// as the environment variable's list, which the first flag replaces.
type listFlag struct {
	specs []string
	set   bool
}

func (f *listFlag) String() string { return strings.Join(f.specs, ",") }

func (f *listFlag) Set(v string) error {
	if !f.set { // the first flag replaces the environment variable's list
		f.specs, f.set = nil, true
	}
	f.specs = append(f.specs, v)
	return nil
}
