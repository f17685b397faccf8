// Package envoyconfig checks an Envoy bootstrap for Sluice offline, without
// an Envoy binary: first against Envoy's API (the generated protos and their
// validation rules, as Envoy itself loads a bootstrap), then against what
// the API cannot know (clusters that exist, filter order, and agreement
// with the admin, the plugin and the build).
//
// The repository's envoy.yaml is checked by this package's tests.
package envoyconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	// Every type a bootstrap may name in an "@type" must be registered to
	// be resolved. These are the ones Sluice's envoy.yaml uses (besides the
	// packages imported above); add the package of any new one.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

// Expect holds the facts a Sluice bootstrap must agree with.
type Expect struct {
	// ResourceName is the ECDS resource the admin serves: the name of the
	// HTTP filter with config_discovery.
	ResourceName string
	// WasmFilename is the plugin file, as `make build` writes it.
	WasmFilename string
	// VMID and RootID must match what the admin pushes, so that a push
	// reconfigures the VM running the default config (keeping buckets).
	VMID, RootID string
	// ParsePlugin validates a plugin configuration (shared/policy.Parse).
	ParsePlugin func([]byte) error
	// HostEnvKeys, when set, are the VM environment variables the default
	// config must take from Envoy's environment: the ones the admin asks for
	// (the telemetry token's), so that its push keeps the same vm_config.
	// Literal key_values are refused: a secret does not belong in a file.
	HostEnvKeys []string
	// HTTP2Clusters are clusters a plugin configuration names for gRPC calls
	// (fleet.cluster): each must exist and speak HTTP/2.
	HTTP2Clusters []string
}

const (
	wasmTypeURL   = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	routerTypeURL = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	httpOptsKey   = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// Parse reads a YAML (or JSON) bootstrap the way Envoy does: into
// envoy.config.bootstrap.v3.Bootstrap, rejecting unknown fields and
// unresolvable "@type"s.
func Parse(data []byte) (*bootstrap.Bootstrap, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("YAML: %w", err)
	}
	js, err := json.Marshal(jsonable(doc))
	if err != nil {
		return nil, fmt.Errorf("YAML to JSON: %w", err)
	}
	var b bootstrap.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return &b, nil
}

// jsonable turns YAML's generic maps into JSON-encodable ones.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
	}
	return v
}

// Validate checks a bootstrap: Parse, Envoy's validation rules on the
// bootstrap and on every message packed in a google.protobuf.Any (which the
// generated ValidateAll does not descend into), then Check. It returns
// every problem found, joined.
func Validate(data []byte, exp Expect) error {
	b, err := Parse(data)
	if err != nil {
		return err
	}
	var errs []error
	if err := b.ValidateAll(); err != nil {
		errs = append(errs, fmt.Errorf("bootstrap: %w", err))
	}
	errs = append(errs, validateAnys(b.ProtoReflect(), "")...)
	if len(errs) > 0 {
		return errors.Join(errs...) // the project checks need a sound bootstrap
	}
	return Check(b, exp)
}

type validator interface{ ValidateAll() error }

// validateAnys unpacks every Any under m (at any depth, including Anys
// inside unpacked Anys) and runs the inner message's validation.
func validateAnys(m protoreflect.Message, path string) []error {
	var errs []error
	walk(m, path, func(path string, a *anypb.Any, inner proto.Message, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			return
		}
		if v, ok := inner.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", path, a.GetTypeUrl(), err))
			}
		}
	})
	return errs
}

// walk calls visit for every Any under m, unpacked, then walks into it.
func walk(m protoreflect.Message, path string, visit func(path string, a *anypb.Any, inner proto.Message, err error)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		visit(path, a, inner, err)
		if err == nil {
			walk(inner.ProtoReflect(), path+"<"+string(inner.ProtoReflect().Descriptor().Name())+">", visit)
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		if path != "" {
			name = path + "." + name
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", name, i), visit)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				walk(e.Message(), fmt.Sprintf("%s[%s]", name, k.String()), visit)
				return true
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			walk(v.Message(), name, visit)
		}
		return true
	})
}

// clusterRefs lists the (message, field) pairs that name a cluster.
var clusterRefs = map[protoreflect.FullName]string{
	"envoy.config.route.v3.RouteAction":                      "cluster",
	"envoy.config.route.v3.WeightedCluster.ClusterWeight":    "name",
	"envoy.config.route.v3.RouteAction.RequestMirrorPolicy":  "cluster",
	"envoy.config.core.v3.GrpcService.EnvoyGrpc":             "cluster_name",
	"envoy.config.core.v3.HttpUri":                           "cluster",
	"envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy": "cluster",
}

// ClusterReference is a cluster named somewhere in the bootstrap.
type ClusterReference struct{ Path, Cluster string }

// References lists every cluster reference in b (routes, gRPC services,
// HTTP URIs, ...), including inside typed configs.
func References(b *bootstrap.Bootstrap) []ClusterReference {
	var refs []ClusterReference
	var scan func(m protoreflect.Message, path string)
	scan = func(m protoreflect.Message, path string) {
		if field, ok := clusterRefs[m.Descriptor().FullName()]; ok {
			if fd := m.Descriptor().Fields().ByName(protoreflect.Name(field)); fd != nil && m.Has(fd) {
				refs = append(refs, ClusterReference{Path: path + "." + field, Cluster: m.Get(fd).String()})
			}
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			name := path + "." + string(fd.Name())
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					scan(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", name, i))
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
					scan(e.Message(), fmt.Sprintf("%s[%s]", name, k.String()))
					return true
				})
			case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
				if a, ok := v.Message().Interface().(*anypb.Any); ok {
					if inner, err := a.UnmarshalNew(); err == nil {
						scan(inner.ProtoReflect(), name+"<"+string(inner.ProtoReflect().Descriptor().Name())+">")
					}
					return true
				}
				scan(v.Message(), name)
			}
			return true
		})
	}
	scan(b.ProtoReflect(), "")
	return refs
}

// Check makes the checks Envoy's API cannot: every referenced cluster
// exists; gRPC clusters speak HTTP/2; every HTTP filter chain ends with the
// router; the Sluice filter is delivered by ECDS under the admin's resource
// name, over a config source that exists, with a default config that runs
// the plugin `make build` writes, with the admin's vm_id and root_id and a
// configuration the plugin's parser accepts.
func Check(b *bootstrap.Bootstrap, exp Expect) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	clusters := map[string]*cluster.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		if clusters[c.GetName()] != nil {
			add("static_resources.clusters: cluster %q is defined twice", c.GetName())
		}
		clusters[c.GetName()] = c
	}
	for _, ref := range References(b) {
		c := clusters[ref.Cluster]
		if c == nil {
			add("%s: cluster %q does not exist (clusters: %s)", strings.TrimPrefix(ref.Path, "."), ref.Cluster, strings.Join(slices.Sorted(maps.Keys(clusters)), ", "))
			continue
		}
		if strings.HasSuffix(ref.Path, "envoy_grpc.cluster_name") && !speaksHTTP2(c) {
			add("%s: cluster %q carries gRPC but is not configured for HTTP/2 (set %s explicit_http_config.http2_protocol_options)",
				strings.TrimPrefix(ref.Path, "."), ref.Cluster, httpOptsKey)
		}
	}

	for _, name := range exp.HTTP2Clusters {
		switch c := clusters[name]; {
		case c == nil:
			add("static_resources.clusters: no cluster %q, which the policy's fleet.cluster names", name)
		case !speaksHTTP2(c):
			add("static_resources.clusters: cluster %q carries the rate limit service's gRPC but is not configured for HTTP/2 (set %s explicit_http_config.http2_protocol_options)",
				name, httpOptsKey)
		}
	}

	sluiceFilters := 0
	for li, l := range b.GetStaticResources().GetListeners() {
		for ci, fc := range l.GetFilterChains() {
			for fi, f := range fc.GetFilters() {
				var m hcm.HttpConnectionManager
				if f.GetTypedConfig().MessageIs(&m) {
					if err := f.GetTypedConfig().UnmarshalTo(&m); err != nil {
						add("listener %q: %v", l.GetName(), err)
						continue
					}
					path := fmt.Sprintf("static_resources.listeners[%d].filter_chains[%d].filters[%d]", li, ci, fi)
					sluiceFilters += checkHTTPFilters(b, &m, path, exp, add)
				}
			}
		}
	}
	if sluiceFilters == 0 {
		add("no HTTP filter named %q with config_discovery: the admin's policies would reach no filter", exp.ResourceName)
	}
	return errors.Join(errs...)
}

func checkHTTPFilters(b *bootstrap.Bootstrap, m *hcm.HttpConnectionManager, path string, exp Expect, add func(string, ...any)) (sluice int) {
	filters := m.GetHttpFilters()
	for i, f := range filters {
		fpath := fmt.Sprintf("%s.http_filters[%d] (%s)", path, i, f.GetName())
		isRouter := f.GetTypedConfig().GetTypeUrl() == routerTypeURL
		if isRouter && i != len(filters)-1 {
			add("%s: the router must be the last HTTP filter; filters after it never run", fpath)
		}
		if i == len(filters)-1 && !isRouter {
			add("%s: the last HTTP filter must be the router (%s)", fpath, routerTypeURL)
		}
		if f.GetTypedConfig().GetTypeUrl() == wasmTypeURL {
			add("%s: the Sluice filter is configured inline; deliver it with config_discovery so the admin can push policies", fpath)
			checkWasm(f.GetTypedConfig(), fpath+".typed_config", exp, add)
		}
		cd := f.GetConfigDiscovery()
		if cd == nil {
			continue
		}
		if f.GetName() != exp.ResourceName {
			add("%s: config_discovery filter name %q is not the admin's ECDS resource %q", fpath, f.GetName(), exp.ResourceName)
			continue
		}
		sluice++
		if !slices.Contains(cd.GetTypeUrls(), wasmTypeURL) {
			add("%s.config_discovery.type_urls: %v must include %s", fpath, cd.GetTypeUrls(), wasmTypeURL)
		}
		checkConfigSource(b, cd.GetConfigSource(), fpath+".config_discovery.config_source", add)
		if cd.GetDefaultConfig() == nil {
			add("%s.config_discovery: no default_config: with the admin down, Envoy would serve without the filter's configuration", fpath)
		} else {
			checkWasm(cd.GetDefaultConfig(), fpath+".config_discovery.default_config", exp, add)
		}
	}
	return sluice
}

// checkConfigSource: ADS needs the bootstrap's ads_config; a gRPC API
// source needs gRPC services (their clusters are checked as references).
func checkConfigSource(b *bootstrap.Bootstrap, cs *core.ConfigSource, path string, add func(string, ...any)) {
	switch {
	case cs.GetAds() != nil:
		ads := b.GetDynamicResources().GetAdsConfig()
		if ads == nil {
			add("%s: uses ADS but dynamic_resources.ads_config is not set", path)
		} else if len(ads.GetGrpcServices()) == 0 {
			add("dynamic_resources.ads_config: no grpc_services: ADS would reach no server")
		}
	case cs.GetApiConfigSource() != nil:
		api := cs.GetApiConfigSource()
		if api.GetApiType() != core.ApiConfigSource_GRPC && api.GetApiType() != core.ApiConfigSource_DELTA_GRPC {
			add("%s.api_config_source: api_type %s; the admin serves gRPC", path, api.GetApiType())
		}
		if len(api.GetGrpcServices()) == 0 {
			add("%s.api_config_source: no grpc_services", path)
		}
	default:
		add("%s: the admin serves ECDS over gRPC: use ads or api_config_source", path)
	}
}

// checkWasm checks a Sluice wasm filter configuration.
func checkWasm(a *anypb.Any, path string, exp Expect, add func(string, ...any)) {
	var w wasmfilter.Wasm
	if err := a.UnmarshalTo(&w); err != nil {
		add("%s: %v (want %s)", path, err, wasmTypeURL)
		return
	}
	pc := w.GetConfig()
	vm := pc.GetVmConfig()
	if pc.GetName() != exp.ResourceName {
		add("%s.config.name: %q, want %q (what the admin pushes)", path, pc.GetName(), exp.ResourceName)
	}
	if pc.GetRootId() != exp.RootID {
		add("%s.config.root_id: %q, want %q (what the admin pushes)", path, pc.GetRootId(), exp.RootID)
	}
	if vm == nil {
		add("%s.config.vm_config: missing", path)
		return
	}
	if vm.GetVmId() != exp.VMID {
		add("%s.config.vm_config.vm_id: %q, want %q: with another vm_id a push starts a new VM and buckets start over", path, vm.GetVmId(), exp.VMID)
	}
	if got := vm.GetCode().GetLocal().GetFilename(); got != exp.WasmFilename {
		add("%s.config.vm_config.code.local.filename: %q, want %q (what `make build` writes)", path, got, exp.WasmFilename)
	}
	if env := vm.GetEnvironmentVariables(); exp.HostEnvKeys != nil {
		if !slices.Equal(env.GetHostEnvKeys(), exp.HostEnvKeys) {
			add("%s.config.vm_config.environment_variables.host_env_keys: %q, want %q (what the admin pushes; another vm_config starts a new VM)",
				path, env.GetHostEnvKeys(), exp.HostEnvKeys)
		}
		if len(env.GetKeyValues()) > 0 {
			add("%s.config.vm_config.environment_variables.key_values: set; take secrets from Envoy's environment with host_env_keys", path)
		}
	}
	var sv wrapperspb.StringValue
	if err := pc.GetConfiguration().UnmarshalTo(&sv); err != nil {
		add("%s.config.configuration: want a google.protobuf.StringValue holding the policy JSON: %v", path, err)
		return
	}
	if exp.ParsePlugin != nil {
		if err := exp.ParsePlugin([]byte(sv.GetValue())); err != nil {
			add("%s.config.configuration: the plugin would reject it:\n%v", path, err)
		}
	}
}

// speaksHTTP2 reports whether c is configured for HTTP/2 upstream.
func speaksHTTP2(c *cluster.Cluster) bool {
	//lint:ignore SA1019 the deprecated form, which Envoy still accepts.
	if c.GetHttp2ProtocolOptions() != nil {
		return true
	}
	a := c.GetTypedExtensionProtocolOptions()[httpOptsKey]
	if a == nil {
		return false
	}
	var o upstreamhttp.HttpProtocolOptions
	if err := a.UnmarshalTo(&o); err != nil {
		return false
	}
	return o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
}
