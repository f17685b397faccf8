package main

import (
	"context"
	"log/slog"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/xds"
)

// exportedWithResets makes the exported manifests (Istio's WasmPlugin,
// Envoy Gateway's EnvoyExtensionPolicy) carry what the admin pushes over
// xDS: the version's configuration with the recent resets. Proxies the
// admin does not push to get a reset when the manifest is applied again.
// The resets cannot be read: the version alone, and a warning.
func exportedWithResets(svc *policies.Service, logger *slog.Logger) func(context.Context, policies.Version) []byte {
	return func(ctx context.Context, v policies.Version) []byte {
		rs, err := svc.PushedResets(ctx)
		if err != nil {
			logger.Warn("exporting without the recent resets: they cannot be read", "err", err)
			return v.JSON
		}
		composed, _ := xds.Compose(v.JSON, rs)
		return composed
	}
}
