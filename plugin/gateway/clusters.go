package main

import (
	"github.com/sluice-rl/sluice/shared/policy"
)

// missingClusters lists the clusters the plugin configuration names
// (telemetry.cluster, fleet.cluster) that the gateway was not given with
// -cluster, each with the field that names it and a -cluster flag to add.
// A configuration that does not parse names none (the plugin refuses it
// with its own errors).
func missingClusters(config []byte, have map[string]bool) []missingCluster {
	cfg, err := policy.Parse(config)
	if err != nil {
		return nil
	}
	var out []missingCluster
	if t := cfg.Telemetry; t != nil && !have[t.Cluster] {
		out = append(out, missingCluster{Cluster: t.Cluster, Field: "telemetry.cluster", Example: t.Cluster + "=http://127.0.0.1:9000"})
	}
	if f := cfg.Fleet; f != nil && !have[f.Cluster] {
		out = append(out, missingCluster{Cluster: f.Cluster, Field: "fleet.cluster", Example: f.Cluster + "=h2c://127.0.0.1:8081"})
	}
	return out
}

// missingCluster is a cluster the configuration names and the gateway lacks.
type missingCluster struct {
	Cluster, Field, Example string
}

// warnMissingClusters logs one WARN per cluster config names that the
// gateway cannot call: the plugin's calls to it fail (telemetry reports are
// dropped; global rules apply on_backend_down).
func (gw *Gateway) warnMissingClusters(config []byte) {
	have := map[string]bool{}
	for name := range gw.opts.Clusters {
		have[name] = true
	}
	for _, m := range missingClusters(config, have) {
		gw.log.Warn("the policy names a cluster this gateway does not have; the plugin's calls to it will fail",
			"cluster", m.Cluster, "field", m.Field, "fix", "-cluster "+m.Example)
	}
}
