package policy

import "strings"

// The "metadata:<namespace>:<key>[.<key>...]" source reads a value of the
// request's Envoy dynamic metadata: Envoy's property path
// metadata.filter_metadata.<namespace>.<key>..., which filters earlier in
// the chain fill (jwt_authn's payload_in_metadata, json_to_metadata,
// ext_authz). The namespace is a filter's name and holds dots, so it ends at
// the first ':'; the keys after it are separated by dots, so a key cannot
// contain one.

// Bounds of a metadata source's name, "<namespace>:<keys>".
const (
	maxMetadataName = 256
	maxMetadataKeys = 8
)

// MetadataPath returns the Envoy property path of a metadata source's name
// ("<namespace>:<key>.<key>", as parsed): "metadata", "filter_metadata",
// the namespace, then each key.
func MetadataPath(name string) []string {
	ns, keys, _ := strings.Cut(name, ":")
	return append([]string{"metadata", "filter_metadata", ns}, strings.Split(keys, ".")...)
}

// checkMetadataName returns "" when name is a valid "<namespace>:<keys>",
// else what is wrong with it.
func checkMetadataName(name string) string {
	const example = ` write "metadata:<namespace>:<key>", e.g. "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"`
	ns, keys, ok := strings.Cut(name, ":")
	switch {
	case name == "":
		return "needs a namespace and a key;" + example
	case !ok || keys == "":
		return "needs a key after the namespace;" + example
	case ns == "":
		return "needs a namespace (the name of the filter that writes the metadata);" + example
	case len(name) > maxMetadataName:
		return "is longer than 256 bytes after \"metadata:\""
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x21 || c == 0x7f {
			return "contains " + quoteByte(name, i) + "; remove it"
		}
	}
	if strings.Contains(keys, ":") {
		return "has a ':' in its keys; the namespace ends at the first ':' and keys are separated by '.'"
	}
	parts := strings.Split(keys, ".")
	if len(parts) > maxMetadataKeys {
		return "has more than 8 keys"
	}
	for _, k := range parts {
		if k == "" {
			return "has an empty key; keys are separated by single dots"
		}
	}
	return ""
}
