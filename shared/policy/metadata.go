package policy

import "strings"

// The "metadata:<namespace>:<keys>" source reads a value of the request's
// Envoy dynamic metadata: Envoy's property path
// metadata.filter_metadata.<namespace>.<key>..., which filters earlier in
// the chain fill (jwt_authn's payload_in_metadata, json_to_metadata,
// ext_authz). The namespace is a filter's name and holds dots, so it ends at
// the first ':'. The keys after it are separated by dots; a key that holds
// dots or colons itself (an issuer URL, Istio's "request.auth.claims") is
// written in brackets: "[https://idp.example.com].sub". A key of digits
// picks an element of a list.

// Bounds of a metadata source's name, "<namespace>:<keys>".
const (
	maxMetadataName = 256
	maxMetadataKeys = 8
)

// MetadataPath returns the Envoy property path of a valid metadata source's
// name ("<namespace>:<keys>", as parsed): "metadata", "filter_metadata",
// the namespace, then each key.
func MetadataPath(name string) []string {
	ns, keys, _ := parseMetadataName(name)
	return append([]string{"metadata", "filter_metadata", ns}, keys...)
}

// checkMetadataName returns "" when name is a valid "<namespace>:<keys>",
// else what is wrong with it.
func checkMetadataName(name string) string {
	_, _, msg := parseMetadataName(name)
	return msg
}

// parseMetadataName splits "<namespace>:<keys>" into the namespace and its
// keys, or says what is wrong.
func parseMetadataName(name string) (ns string, keys []string, msg string) {
	const example = ` write "metadata:<namespace>:<key>", e.g. "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"`
	ns, rest, ok := strings.Cut(name, ":")
	switch {
	case name == "":
		return "", nil, "needs a namespace and a key;" + example
	case !ok || rest == "":
		return "", nil, "needs a key after the namespace;" + example
	case ns == "":
		return "", nil, "needs a namespace (the name of the filter that writes the metadata);" + example
	case len(name) > maxMetadataName:
		return "", nil, "is longer than 256 bytes after \"metadata:\""
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x21 || c == 0x7f {
			return "", nil, "contains " + quoteByte(name, i) + "; remove it"
		}
	}
	if strings.ContainsAny(ns, "[]") {
		return "", nil, "has a bracket in its namespace; brackets hold a key"
	}
	for rest != "" {
		key, after, msg := nextMetadataKey(rest)
		if msg != "" {
			return "", nil, msg
		}
		if keys = append(keys, key); len(keys) > maxMetadataKeys {
			return "", nil, "has more than 8 keys"
		}
		rest = after
	}
	return ns, keys, ""
}

// nextMetadataKey reads the first key of s: bracketed ("[a.b:c]") or bare
// (up to the next dot), and what follows its separating dot.
func nextMetadataKey(s string) (key, rest string, msg string) {
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		switch {
		case end < 0:
			return "", "", "has a '[' without its ']'"
		case end == 1:
			return "", "", "has an empty key \"[]\""
		case strings.IndexByte(s[1:end], '[') >= 0:
			return "", "", "has a '[' inside brackets"
		}
		key, rest = s[1:end], s[end+1:]
		if rest == "" {
			return key, "", ""
		}
		if rest[0] != '.' || len(rest) == 1 {
			return "", "", "needs a dot and a key after " + quoteShort(s[:end+1])
		}
		return key, rest[1:], ""
	}
	key, rest, more := strings.Cut(s, ".")
	switch {
	case key == "":
		return "", "", "has an empty key; keys are separated by single dots"
	case strings.ContainsAny(key, "[]"):
		return "", "", "has a bracket inside the key " + quoteShort(key) + "; a bracketed key is the whole key: \"[a.b]\""
	case strings.Contains(key, ":"):
		return "", "", "has a ':' in the key " + quoteShort(key) + `; write a key that holds ':' or '.' in brackets, e.g. "[https://idp.example.com]"`
	case more && rest == "":
		return "", "", "has an empty key; keys are separated by single dots"
	}
	return key, rest, ""
}
