package main

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
)

// The plugin VMs' environment (Envoy: vm_config.environment_variables)
// carries, for instance, the telemetry token of a policy with
// telemetry.token_env. It comes from -vm-env and, in xDS mode, from the
// admin's pushed vm_config. Envoy keys a VM by its vm_config: a different
// environment means new VMs. The gateway does the same: it starts new VMs
// with the new environment and configuration (sharing the old shared data,
// as Envoy's VMs with one vm_id share theirs), moves new requests to them
// and closes the old ones once their requests are done.

// hostRef is one generation of plugin VMs and the requests using it.
type hostRef struct {
	host   *wasmhost.Host
	env    map[string]string
	inUse  sync.RWMutex // read-held by each request; write-held to close
	closed bool         // under inUse
}

// acquire returns the current VMs, held until release.
func (gw *Gateway) acquire() *hostRef {
	for {
		ref := gw.cur.Load()
		ref.inUse.RLock()
		if !ref.closed || gw.cur.Load() == ref { // closed and current: the gateway is closing; requests fail
			return ref
		}
		ref.inUse.RUnlock() // replaced and closed meanwhile: take the new one
	}
}

func (ref *hostRef) release() { ref.inUse.RUnlock() }

// retire waits for the requests on ref, then closes its VMs.
func (ref *hostRef) retire(ctx context.Context) error {
	ref.inUse.Lock()
	defer ref.inUse.Unlock()
	ref.closed = true
	return ref.host.Close(ctx)
}

// vmEnv is the environment for a pushed one: -vm-env, overridden by what
// the admin pushed.
func (gw *Gateway) vmEnv(pushed map[string]string) map[string]string {
	env := maps.Clone(gw.opts.VMEnv)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, pushed)
	return env
}

// restartVMs starts new VMs with env and config (which must be accepted by
// every VM), switches new requests to them and retires the old ones in the
// background. Called with configMu held.
func (gw *Gateway) restartVMs(ctx context.Context, config []byte, env map[string]string) error {
	old := gw.cur.Load()
	cfg := gw.hostCfg
	cfg.PluginConfig, cfg.Env, cfg.SharedData = config, env, old.host.SharedData()
	host, err := wasmhost.New(ctx, cfg)
	if err != nil {
		return fmt.Errorf("starting VMs with the new vm_config environment: %w", err)
	}
	host.StartTicker(gw.runCtx)
	gw.cur.Store(&hostRef{host: host, env: env})
	gw.log.Info("new VM environment: started new plugin VMs (as Envoy does for a new vm_config)",
		"variables", strings.Join(slices.Sorted(maps.Keys(env)), ","))
	gw.retiring.Add(1)
	go func() {
		defer gw.retiring.Done()
		if err := old.retire(context.Background()); err != nil {
			gw.log.Error("closing the previous plugin VMs", "err", err)
		}
	}()
	return nil
}

// closeHosts closes the current VMs after the previous ones are retired.
func (gw *Gateway) closeHosts(ctx context.Context) error {
	gw.configMu.Lock()
	defer gw.configMu.Unlock()
	gw.retiring.Wait()
	return gw.cur.Load().retire(ctx)
}

// pushedEnv is the environment a vm_config asks for: key_values as given,
// host_env_keys from the gateway's own environment (a missing one is left
// out, as Envoy does).
func pushedEnv(ev *wasmv3.EnvironmentVariables, lookup func(string) (string, bool)) map[string]string {
	env := maps.Clone(ev.GetKeyValues())
	if env == nil {
		env = map[string]string{}
	}
	for _, k := range ev.GetHostEnvKeys() {
		if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	return env
}

var vmEnvName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseVMEnv turns -vm-env specs into an environment.
func parseVMEnv(specs []string, lookup func(string) (string, bool)) (map[string]string, error) {
	env := map[string]string{}
	for _, spec := range specs {
		name, value, set := strings.Cut(strings.TrimSpace(spec), "=")
		if !vmEnvName.MatchString(name) {
			return nil, fmt.Errorf("-vm-env %q: want NAME=VALUE or NAME (copied from this process's environment); NAME is letters, digits and _", spec)
		}
		if !set {
			v, ok := lookup(name)
			if !ok {
				return nil, fmt.Errorf("-vm-env %s: the variable is not set in the gateway's environment", name)
			}
			value = v
		}
		env[name] = value
	}
	return env, nil
}
