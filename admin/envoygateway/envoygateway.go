// Package envoygateway renders the Envoy Gateway EnvoyExtensionPolicy
// (gateway.envoyproxy.io/v1alpha1) that runs Sluice on a Gateway or an
// HTTPRoute with a given policy as the Wasm extension's config.
//
// Choices, documented in docs/kubernetes.md:
//   - failOpen true by default: a module that cannot be fetched or
//     crashes lets traffic through (a rate limiter must not become an
//     outage), as the Istio export's FAIL_OPEN.
//   - rootID "sluice" (the filter's root context); env.hostKeys passes the
//     telemetry token's variable from the Envoy container, so the secret
//     stays out of the policy.
//   - the module comes from the image make images builds (the compat
//     variant, which Envoy Gateway's fetcher reads), or from an HTTP URL,
//     which must carry the module's sha256.
package envoygateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/sluice-rl/sluice/admin/istio"
	"github.com/sluice-rl/sluice/shared/policy"
)

// Defaults.
const (
	DefaultName      = "sluice-ratelimit"
	DefaultNamespace = "default"
	DefaultImage     = istio.DefaultImage
	DefaultTarget    = "Gateway/eg"
	RootID           = istio.PluginName
	APIVersion       = "gateway.envoyproxy.io/v1alpha1"
	Kind             = "EnvoyExtensionPolicy"
	GatewayAPIGroup  = "gateway.networking.k8s.io"
)

// MaskedTokenNote heads a manifest whose policy has a literal telemetry
// token.
const MaskedTokenNote = "# WARNING: the policy's telemetry.token is a secret and is masked here (" + policy.SecretMask + ").\n" +
	"# Use \"token_env\" in the policy instead and set that variable in the Envoy container\n" +
	"# from a Secret (wasm[].env.hostKeys below passes it to the plugin); see docs/kubernetes.md.\n"

// Options describe where the module comes from and what the policy
// attaches to.
type Options struct {
	Name      string // metadata.name (default DefaultName)
	Namespace string // metadata.namespace: the target's namespace (default DefaultNamespace)
	// Image is the OCI image, registry/repository:tag or @sha256:digest
	// (an oci:// prefix is dropped). Default DefaultImage unless HTTPURL is set.
	Image string
	// HTTPURL serves the module over http(s); SHA256 is then required.
	HTTPURL string
	// SHA256: for an image, its manifest digest's hex; for HTTP, the module's.
	SHA256 string
	// Target is Kind/name: Gateway/<name> or HTTPRoute/<name> (default DefaultTarget).
	Target string
	// FailOpen lets traffic through when the module cannot run (default true).
	FailOpen *bool
	// TokenEnv is passed from the Envoy container's environment (env.hostKeys).
	TokenEnv string
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	sha256Hex    = regexp.MustCompile(`^[a-f0-9]{64}$`)
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// httpURL is the CRD's pattern for code.http.url, anchored.
	httpURL = regexp.MustCompile(`^https?://[^\s/?#]+[^\s]*$`)
)

// ParseTarget splits Kind/name and checks both.
func ParseTarget(s string) (kind, name string, err error) {
	kind, name, ok := strings.Cut(s, "/")
	switch {
	case !ok:
		return "", "", fmt.Errorf("target: %q is not Kind/name (Gateway/eg or HTTPRoute/backend)", s)
	case kind != "Gateway" && kind != "HTTPRoute":
		return "", "", fmt.Errorf("target: kind %q is not Gateway or HTTPRoute", kind)
	case !dnsSubdomain.MatchString(name):
		return "", "", fmt.Errorf("target: %q is not a valid Kubernetes name", name)
	}
	return kind, name, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Target == "" {
		o.Target = DefaultTarget
	}
	if o.FailOpen == nil {
		t := true
		o.FailOpen = &t
	}
	o.Image = strings.TrimPrefix(o.Image, "oci://")
	if o.Image == "" && o.HTTPURL == "" {
		o.Image = DefaultImage
	}
	var errs []error
	if !dnsSubdomain.MatchString(o.Name) {
		errs = append(errs, fmt.Errorf("name: %q is not a valid Kubernetes name (lower-case letters, digits, '-' and '.', at most 253)", o.Name))
	}
	if !dnsLabel.MatchString(o.Namespace) {
		errs = append(errs, fmt.Errorf("namespace: %q is not a valid Kubernetes namespace (lower-case letters, digits and '-', at most 63)", o.Namespace))
	}
	if _, _, err := ParseTarget(o.Target); err != nil {
		errs = append(errs, err)
	}
	switch {
	case o.Image != "" && o.HTTPURL != "":
		errs = append(errs, errors.New("image, http-url: give one module source, not both"))
	case o.HTTPURL != "":
		if !httpURL.MatchString(o.HTTPURL) {
			errs = append(errs, fmt.Errorf("http-url: %q is not an http:// or https:// URL", o.HTTPURL))
		}
		if o.SHA256 == "" {
			errs = append(errs, errors.New("sha256: required with http-url (the module's sha256, as make images prints)"))
		}
	default:
		if _, err := name.ParseReference(o.Image, name.StrictValidation); err != nil {
			errs = append(errs, fmt.Errorf("image: %q is not registry/repository:tag or @sha256:digest: %v", o.Image, err))
		}
	}
	if o.SHA256 != "" && !sha256Hex.MatchString(o.SHA256) {
		errs = append(errs, fmt.Errorf("sha256: %q must be 64 lower-case hex digits", o.SHA256))
	}
	if o.TokenEnv != "" && !envName.MatchString(o.TokenEnv) {
		errs = append(errs, fmt.Errorf("token-env: %q is not an environment variable name", o.TokenEnv))
	}
	return o, errors.Join(errs...)
}

// Render builds the EnvoyExtensionPolicy for a policy version. config is
// the plugin configuration (a JSON object); it becomes wasm[0].config.
func Render(config []byte, version int64, opts Options) (*istio.Manifest, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	trimmed := bytes.TrimSpace(config)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, errors.New("config: the policy must be a JSON object")
	}
	if !utf8.Valid(trimmed) { // a Kubernetes object, like the xDS push, carries UTF-8 only
		return nil, errors.New("config: the policy is not UTF-8")
	}
	kind, target, _ := ParseTarget(opts.Target)
	w := wasm{
		Name:     "sluice",
		RootID:   RootID,
		Code:     code{},
		Config:   json.RawMessage(policy.MaskSecrets(trimmed)),
		FailOpen: *opts.FailOpen,
	}
	if opts.HTTPURL != "" {
		w.Code.Type = "HTTP"
		w.Code.HTTP = &source{URL: opts.HTTPURL, SHA256: opts.SHA256}
	} else {
		w.Code.Type = "Image"
		w.Code.Image = &source{URL: opts.Image, SHA256: opts.SHA256}
	}
	if opts.TokenEnv != "" {
		w.Env = &env{HostKeys: []string{opts.TokenEnv}}
	}
	masked := policy.HasMaskedSecret(w.Config) && !policy.HasMaskedSecret(trimmed)
	p := extensionPolicy{
		APIVersion: APIVersion,
		Kind:       Kind,
		Metadata: istio.ObjectMeta{
			Name:        opts.Name,
			Namespace:   opts.Namespace,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "sluice-admin", "app.kubernetes.io/name": "sluice"},
			Annotations: map[string]string{istio.VersionAnnotation: strconv.FormatInt(version, 10)},
		},
		Spec: spec{
			TargetRefs: []targetRef{{Group: GatewayAPIGroup, Kind: kind, Name: target}},
			Wasm:       []wasm{w},
		},
	}
	doc, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("rendering the EnvoyExtensionPolicy: %w", err)
	}
	return istio.NewManifest(doc, masked, MaskedTokenNote).WithWarnings(ClusterNotes(trimmed)), nil
}

// ClusterNotes names the clusters the policy config calls (telemetry
// reports, the rate limit service of global rules): Envoy Gateway creates
// none for a Wasm extension's own calls, so each must be added to the
// Gateway's Envoy, or the call fails.
func ClusterNotes(config []byte) []string {
	telemetry, fleet := istio.CalledClusters(config)
	const how = ": Envoy Gateway creates no cluster for a Wasm extension's own calls; the Gateway's Envoy needs it added (the Helm chart's envoyGateway.patchClusters does, docs/kubernetes.md)"
	var out []string
	if telemetry != "" {
		out = append(out, fmt.Sprintf("the policy sends telemetry reports to the cluster %q%s", telemetry, how))
	}
	if fleet != "" {
		out = append(out, fmt.Sprintf("the policy's global rules call the cluster %q%s", fleet, how))
	}
	return out
}

type extensionPolicy struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Metadata   istio.ObjectMeta `json:"metadata"`
	Spec       spec             `json:"spec"`
}

type spec struct {
	TargetRefs []targetRef `json:"targetRefs"`
	Wasm       []wasm      `json:"wasm"`
}

type targetRef struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
}

type wasm struct {
	Name     string          `json:"name"`
	RootID   string          `json:"rootID"`
	Code     code            `json:"code"`
	Config   json.RawMessage `json:"config"`
	FailOpen bool            `json:"failOpen"`
	Env      *env            `json:"env,omitempty"`
}

type code struct {
	Type  string  `json:"type"`
	Image *source `json:"image,omitempty"`
	HTTP  *source `json:"http,omitempty"`
}

type source struct {
	URL    string `json:"url"`
	SHA256 string `json:"sha256,omitempty"`
}

type env struct {
	HostKeys []string `json:"hostKeys"`
}
