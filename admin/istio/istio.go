// Package istio renders the Istio WasmPlugin resource
// (extensions.istio.io/v1alpha1) that runs Sluice in a mesh with a given
// policy as its pluginConfig.
//
// Choices, documented in docs/admin.md:
//   - phase AUTHZ: the filter runs after Istio's authentication filters
//     (RequestAuthentication has verified the JWT, so jwt:<claim> keys read
//     verified claims) and before authorization, stats and the app, so
//     requests over the limit cost the workload nothing.
//   - failStrategy FAIL_OPEN: if the module cannot be fetched or crashes,
//     traffic flows unlimited rather than being refused (a rate limiter must
//     not become an outage). Sluice itself fails open on storage errors too.
//   - pluginName "sluice" (Envoy's root_id) and vmConfig GOGC, which makes
//     the Go runtime collect less often (see README: golang/go#78513).
//   - attached by a workload selector, or by targetRefs (targets.go) to
//     Gateway API gateways and waypoints, which ignore selectors.
package istio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// MaskedTokenNote heads a manifest whose policy has a literal
// telemetry.token: the admin never prints secrets, so the manifest carries
// the mask, and the plugin would send it as the token.
const MaskedTokenNote = "# WARNING: the policy's telemetry.token is a secret and is masked here (" + policy.SecretMask + ").\n" +
	"# Use \"token_env\" in the policy instead and set that variable in the istio-proxy container\n" +
	"# from a Secret (vmConfig.env below passes it to the plugin); see docs/admin.md.\n"

// Defaults.
const (
	DefaultName      = "sluice-ratelimit"
	DefaultNamespace = "istio-system"
	DefaultURL       = "oci://" + DefaultImage
	// DefaultImage is the Wasm image make images builds (compat variant),
	// as published; Envoy Gateway pulls the same image.
	DefaultImage = "ghcr.io/sluice-rl/ratelimit-wasm:latest"
	DefaultGOGC  = "400"
	PluginName   = "sluice"
	Phase        = "AUTHZ"
	FailStrategy = "FAIL_OPEN"

	// VersionAnnotation carries the policy version number.
	VersionAnnotation = "sluice-rl.github.io/policy-version"
)

// Options describe where and how the plugin runs.
type Options struct {
	Name      string            // metadata.name (default DefaultName)
	Namespace string            // metadata.namespace (default DefaultNamespace: the mesh root namespace applies it mesh-wide)
	URL       string            // the module: oci://, file://, http(s):// (default DefaultURL)
	SHA256    string            // optional checksum of the module, 64 hex digits
	Selector  map[string]string // workload labels; empty: every workload in Namespace
	// Targets attach the plugin to Gateway API Gateways, or to the
	// waypoints of Services, instead of Selector (Istio takes one or
	// the other; waypoints only take targets).
	Targets []TargetRef
	GOGC    string // the Go GC target for the plugin VM (default DefaultGOGC)
	// TokenEnv, when set, is passed to the plugin VM from the proxy's own
	// environment (vmConfig.env valueFrom HOST): the telemetry token of
	// policies with telemetry.token_env. Set it in the istio-proxy
	// container from a Secret (docs/admin.md).
	TokenEnv string
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	labelValue   = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$`)
	labelName    = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	sha256Hex    = regexp.MustCompile(`^[a-f0-9]{64}$`)
	gogcValue    = regexp.MustCompile(`^([1-9][0-9]{0,5}|off)$`)
)

// withDefaults fills in defaults and checks every option, naming the one
// that is wrong.
func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.URL == "" {
		o.URL = DefaultURL
	}
	if o.GOGC == "" {
		o.GOGC = DefaultGOGC
	}
	var errs []error
	if !dnsSubdomain.MatchString(o.Name) {
		errs = append(errs, fmt.Errorf("name: %q is not a valid Kubernetes name (lower-case letters, digits, '-' and '.', at most 253)", o.Name))
	}
	if !dnsLabel.MatchString(o.Namespace) {
		errs = append(errs, fmt.Errorf("namespace: %q is not a valid Kubernetes namespace (lower-case letters, digits and '-', at most 63)", o.Namespace))
	}
	if err := checkURL(o.URL); err != nil {
		errs = append(errs, err)
	}
	if o.SHA256 != "" && !sha256Hex.MatchString(o.SHA256) {
		errs = append(errs, fmt.Errorf("sha256: %q must be 64 lower-case hex digits", o.SHA256))
	}
	if !gogcValue.MatchString(o.GOGC) {
		errs = append(errs, fmt.Errorf("gogc: %q must be a positive integer percentage or \"off\"", o.GOGC))
	}
	for _, k := range slices.Sorted(maps.Keys(o.Selector)) {
		name := k
		if i := strings.LastIndexByte(k, '/'); i >= 0 {
			if !dnsSubdomain.MatchString(k[:i]) {
				errs = append(errs, fmt.Errorf("selector: label key %q has an invalid prefix", k))
				continue
			}
			name = k[i+1:]
		}
		if !labelName.MatchString(name) {
			errs = append(errs, fmt.Errorf("selector: %q is not a valid label key", k))
		}
		if !labelValue.MatchString(o.Selector[k]) {
			errs = append(errs, fmt.Errorf("selector: %q is not a valid value for label %q", o.Selector[k], k))
		}
	}
	if err := checkTargets(o.Targets); err != nil {
		errs = append(errs, err)
	}
	if len(o.Selector) > 0 && len(o.Targets) > 0 {
		errs = append(errs, errors.New("selector and target: Istio takes one or the other; a selector picks workloads (sidecars, gateways by label), targets name Gateways or waypoints' Services"))
	}
	return o, errors.Join(errs...)
}

func checkURL(u string) error {
	scheme, rest, ok := strings.Cut(u, "://")
	switch {
	case !ok:
		return fmt.Errorf("url: %q has no scheme; use oci://, file://, http:// or https://", u)
	case scheme != "oci" && scheme != "file" && scheme != "http" && scheme != "https":
		return fmt.Errorf("url: scheme %q is not supported by Istio; use oci://, file://, http:// or https://", scheme)
	case rest == "" || strings.ContainsAny(u, " \t\r\n"):
		return fmt.Errorf("url: %q is not a valid module location", u)
	}
	return nil
}

// ParseSelector parses "key=value,key2=value2" (as given to a flag).
func ParseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("selector: %q is not key=value", part)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("selector: label %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// Manifest is a rendered Kubernetes object (here a WasmPlugin).
type Manifest struct {
	doc      []byte   // JSON, in field order
	masked   bool     // a literal telemetry token was replaced by the mask
	note     string   // heads the YAML when masked
	warnings []string // head the YAML as comments
}

// istioClusterName is how Istio names the Envoy cluster of a Service's
// port, outbound|9000||sluice.sluice.svc.cluster.local, or of a port of
// the proxy's own workload, inbound|9000||. It creates no cluster of any
// other shape that the plugin could call.
var istioClusterName = regexp.MustCompile(`^(outbound|inbound)\|[0-9]+\|[^|]*\|[^|]*$`)

// ClusterWarnings names the clusters the policy config calls (telemetry
// reports, the rate limit service of global rules) that are not named as
// Istio names clusters: under Istio, a call to them fails and the plugin
// sends no reports, or its global rules fall back to on_backend_down.
func ClusterWarnings(config []byte) []string {
	telemetry, fleet := CalledClusters(config)
	const how = "; under Istio a Service's port is the cluster outbound|<port>||<service>.<namespace>.svc.cluster.local (docs/kubernetes.md)"
	var out []string
	if telemetry != "" && !istioClusterName.MatchString(telemetry) {
		out = append(out, fmt.Sprintf("telemetry.cluster %q is not a cluster Istio creates: no report will reach the admin%s", telemetry, how))
	}
	if fleet != "" && !istioClusterName.MatchString(fleet) {
		out = append(out, fmt.Sprintf("fleet.cluster %q is not a cluster Istio creates: global rules will not reach the rate limit service and fall back to on_backend_down%s", fleet, how))
	}
	return out
}

// CalledClusters returns the Envoy clusters a policy config calls itself:
// telemetry.cluster (reports) and fleet.cluster (the rate limit service
// of global rules), "" where it has none or does not read as JSON (Render
// refuses that).
func CalledClusters(config []byte) (telemetry, fleet string) {
	var p struct {
		Telemetry struct{ Cluster string } `json:"telemetry"`
		Fleet     struct{ Cluster string } `json:"fleet"`
	}
	if json.Unmarshal(config, &p) != nil {
		return "", ""
	}
	return p.Telemetry.Cluster, p.Fleet.Cluster
}

// NewManifest wraps another object rendered as JSON (fields in order) so
// it prints as this package's manifests do; maskedNote heads the YAML when
// masked.
func NewManifest(doc []byte, masked bool, maskedNote string) *Manifest {
	return &Manifest{doc: doc, masked: masked, note: maskedNote}
}

// WithWarnings adds warnings that head the YAML as comments.
func (m *Manifest) WithWarnings(ws []string) *Manifest {
	m.warnings = append(m.warnings, ws...)
	return m
}

// Warnings are what will not work under Istio as the policy and the
// options stand (they head the YAML as comments).
func (m *Manifest) Warnings() []string { return m.warnings }

// Masked reports whether the policy's literal telemetry token was masked.
func (m *Manifest) Masked() bool { return m.masked }

// Render builds the WasmPlugin for a policy version. config is the plugin
// configuration (a JSON object); it becomes spec.pluginConfig.
func Render(config []byte, version int64, opts Options) (*Manifest, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	trimmed := bytes.TrimSpace(config)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, errors.New("pluginConfig: the policy must be a JSON object")
	}
	if !utf8.Valid(trimmed) { // a Kubernetes object, like the xDS push, carries UTF-8 only
		return nil, errors.New("pluginConfig: the policy is not UTF-8")
	}
	m := wasmPlugin{
		APIVersion: "extensions.istio.io/v1alpha1",
		Kind:       "WasmPlugin",
		Metadata: ObjectMeta{
			Name:        opts.Name,
			Namespace:   opts.Namespace,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "sluice-admin", "app.kubernetes.io/name": "sluice"},
			Annotations: map[string]string{VersionAnnotation: strconv.FormatInt(version, 10)},
		},
		Spec: spec{
			URL:          opts.URL,
			SHA256:       opts.SHA256,
			PluginName:   PluginName,
			Phase:        Phase,
			FailStrategy: FailStrategy,
			Type:         "HTTP",
			VMConfig:     vmConfig{Env: []envVar{{Name: "GOGC", Value: opts.GOGC}}},
			PluginConfig: json.RawMessage(policy.MaskSecrets(trimmed)),
		},
	}
	if opts.TokenEnv != "" {
		m.Spec.VMConfig.Env = append(m.Spec.VMConfig.Env, envVar{Name: opts.TokenEnv, ValueFrom: "HOST"})
	}
	masked := policy.HasMaskedSecret(m.Spec.PluginConfig) && !policy.HasMaskedSecret(trimmed)
	if len(opts.Selector) > 0 {
		m.Spec.Selector = &selector{MatchLabels: opts.Selector}
	}
	m.Spec.TargetRefs = opts.Targets
	doc, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("rendering the WasmPlugin: %w", err)
	}
	warnings := append(ClusterWarnings(trimmed), targetWarnings(trimmed, opts)...)
	return &Manifest{doc: doc, masked: masked, note: MaskedTokenNote, warnings: warnings}, nil
}

// JSON returns the manifest as indented JSON (kubectl accepts it).
func (m *Manifest) JSON() []byte {
	var b bytes.Buffer
	json.Indent(&b, m.doc, "", "  ")
	b.WriteByte('\n')
	return b.Bytes()
}

// Spec returns spec alone as JSON: what protojson reads into the
// istio.io/api WasmPlugin message.
func (m *Manifest) Spec() []byte {
	var w struct {
		Spec json.RawMessage `json:"spec"`
	}
	json.Unmarshal(m.doc, &w)
	return w.Spec
}

// YAML returns the manifest as YAML, fields in the same order as JSON.
func (m *Manifest) YAML() ([]byte, error) {
	// YAML is a superset of JSON: read the JSON as a YAML node tree (which
	// keeps key order), drop the flow style, and print it as block YAML.
	var n yaml.Node
	if err := yaml.Unmarshal(m.doc, &n); err != nil {
		return nil, fmt.Errorf("rendering YAML: %w", err)
	}
	plain(&n)
	var b bytes.Buffer
	b.WriteString("# Generated by the Sluice admin. Apply with: kubectl apply -f <this file>\n")
	if m.masked {
		b.WriteString(m.note)
	}
	for _, w := range m.warnings {
		b.WriteString("# WARNING: " + w + ".\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, fmt.Errorf("rendering YAML: %w", err)
	}
	enc.Close()
	return b.Bytes(), nil
}

// plain resets styles so the encoder prints block collections. A string is
// printed plain only when every YAML parser reads it back as that string:
// kubectl's YAML 1.1 reads yes, on, y, 12:30 or 1_000 as booleans and
// numbers, so anything not obviously a word is double-quoted.
func plain(n *yaml.Node) {
	switch {
	case n.Kind != yaml.ScalarNode:
		n.Style = 0
	case n.Tag == "!!str" && safePlain.MatchString(n.Value) && !yaml11Words[strings.ToLower(n.Value)]:
		n.Style = 0
	case n.Tag == "!!str":
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		plain(c)
	}
}

var safePlain = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_./-]*(:[A-Za-z0-9_./-]+)*$`)

// yaml11Words are read as booleans or null by YAML 1.1 parsers.
var yaml11Words = map[string]bool{
	"y": true, "yes": true, "n": true, "no": true, "true": true, "false": true,
	"on": true, "off": true, "null": true,
}

type wasmPlugin struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       spec       `json:"spec"`
}

// ObjectMeta is the part of a Kubernetes object's metadata the exported
// manifests set (the Envoy Gateway export uses it too).
type ObjectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type spec struct {
	Selector     *selector       `json:"selector,omitempty"`
	TargetRefs   []TargetRef     `json:"targetRefs,omitempty"`
	URL          string          `json:"url"`
	SHA256       string          `json:"sha256,omitempty"`
	PluginName   string          `json:"pluginName"`
	Phase        string          `json:"phase"`
	FailStrategy string          `json:"failStrategy"`
	Type         string          `json:"type"`
	VMConfig     vmConfig        `json:"vmConfig"`
	PluginConfig json.RawMessage `json:"pluginConfig"`
}

type selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type vmConfig struct {
	Env []envVar `json:"env"`
}

type envVar struct {
	Name      string `json:"name"`
	ValueFrom string `json:"valueFrom,omitempty"` // "HOST": from the proxy's environment
	Value     string `json:"value,omitempty"`
}
