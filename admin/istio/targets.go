package istio

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// TargetRef is one of a WasmPlugin's targetRefs: the resource whose proxies
// run the plugin, in the WasmPlugin's own namespace.
type TargetRef struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
}

// String is the Kind/name form the flag and the API take.
func (t TargetRef) String() string { return t.Kind + "/" + t.Name }

// targetGroups are the kinds Istio lets a WasmPlugin target, with their API
// groups: a Gateway API Gateway (an ingress or a waypoint), a GatewayClass
// (every Gateway of the class; from the root namespace), and, for
// waypoints, the Service or ServiceEntry whose traffic they carry.
var targetGroups = map[string]string{
	"Gateway":      "gateway.networking.k8s.io",
	"GatewayClass": "gateway.networking.k8s.io",
	"Service":      "",
	"ServiceEntry": "networking.istio.io",
}

// MaxTargets is the most targetRefs Istio's CRD accepts.
const MaxTargets = 16

// WaypointClass is the GatewayClass of Istio's waypoints.
const WaypointClass = "istio-waypoint"

// serviceName is a Kubernetes Service's name (an RFC 1035 label).
var serviceName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParseTargets parses "Kind/name,Kind/name" (as given to a flag or in a
// query) into targetRefs, each kind with its API group.
func ParseTargets(s string) ([]TargetRef, error) {
	var out []TargetRef
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		kind, name, ok := strings.Cut(strings.TrimSpace(part), "/")
		if !ok || kind == "" || name == "" {
			return nil, fmt.Errorf("target: %q is not Kind/name (Gateway/public, Service/reviews)", part)
		}
		group, known := targetGroups[kind]
		if !known {
			group = "?"
		}
		out = append(out, TargetRef{Group: group, Kind: kind, Name: name})
	}
	return out, checkTargets(out)
}

// checkTargets checks targets as Istio would, naming the one that is wrong.
func checkTargets(targets []TargetRef) error {
	var errs []error
	if len(targets) > MaxTargets {
		errs = append(errs, fmt.Errorf("target: %d targets, Istio takes at most %d", len(targets), MaxTargets))
	}
	seen := map[TargetRef]bool{}
	for _, t := range targets {
		group, known := targetGroups[t.Kind]
		switch {
		case !known:
			errs = append(errs, fmt.Errorf("target: kind %q cannot carry a WasmPlugin; use %s", t.Kind, strings.Join(slices.Sorted(maps.Keys(targetGroups)), ", ")))
			continue
		case t.Group != group && !(t.Group == "core" && group == ""):
			errs = append(errs, fmt.Errorf("target: %s is in API group %q, not %q", t.Kind, group, t.Group))
		case t.Kind == "Service" && !serviceName.MatchString(t.Name):
			errs = append(errs, fmt.Errorf("target: %q is not a valid Service name (lower-case letters, digits and '-', starting with a letter, at most 63)", t.Name))
		case t.Kind != "Service" && !dnsSubdomain.MatchString(t.Name):
			errs = append(errs, fmt.Errorf("target: %q is not a valid Kubernetes name (lower-case letters, digits, '-' and '.', at most 253)", t.Name))
		case seen[t]:
			errs = append(errs, fmt.Errorf("target: %s given twice", t))
		}
		seen[t] = true
	}
	return errors.Join(errs...)
}

// onWaypoint reports whether a target attaches the plugin to waypoints:
// a Service or ServiceEntry (their waypoint), or the waypoints' class.
// A Gateway may be an ingress or a waypoint; its class is not known here.
func (t TargetRef) onWaypoint() bool {
	return t.Kind == "Service" || t.Kind == "ServiceEntry" || (t.Kind == "GatewayClass" && t.Name == WaypointClass)
}

// targetWarnings names what will not work as the targets and the policy
// stand: a GatewayClass target outside the root namespace (Istio ignores
// it), and clusters the policy calls from waypoints, which have them only
// for the Services their routes send to.
func targetWarnings(config []byte, opts Options) []string {
	var out []string
	for _, t := range opts.Targets {
		if t.Kind == "GatewayClass" && opts.Namespace != DefaultNamespace {
			out = append(out, fmt.Sprintf("target %s applies only from the mesh's root namespace (%s unless meshConfig.rootNamespace says otherwise), not from %s", t, DefaultNamespace, opts.Namespace))
		}
	}
	i := slices.IndexFunc(opts.Targets, TargetRef.onWaypoint)
	if i < 0 {
		return out
	}
	telemetry, fleet := CalledClusters(config)
	var called []string
	if telemetry != "" {
		called = append(called, fmt.Sprintf("telemetry.cluster %q", telemetry))
	}
	if fleet != "" {
		called = append(called, fmt.Sprintf("fleet.cluster %q", fleet))
	}
	if len(called) > 0 {
		out = append(out, fmt.Sprintf("target %s runs the filter in waypoints, which have a cluster for the admin's Service only if a route or the mesh's extensionProviders name it: without one, %s cannot be called, no report reaches the admin and global rules fall back to on_backend_down (docs/kubernetes.md)", opts.Targets[i], strings.Join(called, " and ")))
	}
	return out
}
