package main

import (
	"flag"
	"os"
	"strconv"

	"github.com/sluice-rl/sluice/admin/envoygateway"
)

// egFlags declares the -eg-* flags: how the Envoy Gateway
// EnvoyExtensionPolicy export is rendered.
func egFlags(fs *flag.FlagSet, o *envoygateway.Options) {
	fs.StringVar(&o.Image, "eg-image", env("SLUICE_EG_IMAGE", ""), "Wasm image in the Envoy Gateway EnvoyExtensionPolicy, registry/repository:tag (default "+envoygateway.DefaultImage+") (SLUICE_EG_IMAGE)")
	fs.StringVar(&o.HTTPURL, "eg-http-url", env("SLUICE_EG_HTTP_URL", ""), "serve the module to Envoy Gateway from this http(s) URL instead of an image; needs -eg-sha256 (SLUICE_EG_HTTP_URL)")
	fs.StringVar(&o.SHA256, "eg-sha256", env("SLUICE_EG_SHA256", ""), "sha256 of the image's manifest, or of the module with -eg-http-url (SLUICE_EG_SHA256)")
	fs.StringVar(&o.Name, "eg-name", env("SLUICE_EG_NAME", envoygateway.DefaultName), "metadata.name of the EnvoyExtensionPolicy (SLUICE_EG_NAME)")
	fs.StringVar(&o.Namespace, "eg-namespace", env("SLUICE_EG_NAMESPACE", envoygateway.DefaultNamespace), "metadata.namespace: the target's namespace (SLUICE_EG_NAMESPACE)")
	fs.StringVar(&o.Target, "eg-target", env("SLUICE_EG_TARGET", envoygateway.DefaultTarget), "what the policy attaches to: Gateway/<name> or HTTPRoute/<name> (SLUICE_EG_TARGET)")
	failOpen := envBoolDefault("SLUICE_EG_FAIL_OPEN", true)
	o.FailOpen = &failOpen
	fs.BoolVar(o.FailOpen, "eg-fail-open", failOpen, "let traffic through when the module cannot be loaded (SLUICE_EG_FAIL_OPEN)")
}

func envBoolDefault(name string, def bool) bool {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def
	}
	return b
}
