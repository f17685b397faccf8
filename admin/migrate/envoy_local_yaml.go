package migrate

// The converter of Envoy's local_ratelimit configurations (envoy_local.go):
// the YAML tree, read with its paths and lines.

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// elDeref follows aliases and opens documents.
func elDeref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && i < 64; i++ {
		switch {
		case n.Kind == yaml.AliasNode:
			n = n.Alias
		case n.Kind == yaml.DocumentNode && len(n.Content) > 0:
			n = n.Content[0]
		case n.Kind == yaml.DocumentNode:
			return nil
		default:
			return n
		}
	}
	return nil
}

// elPairs are a mapping's keys and values, aliases followed and merge keys
// ("<<") expanded before the mapping's own keys, which win.
func elPairs(n *yaml.Node) [][2]*yaml.Node { return elAppendPairs(nil, elDeref(n), 0) }

func elAppendPairs(out [][2]*yaml.Node, n *yaml.Node, depth int) [][2]*yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode || depth > 8 {
		return out
	}
	var own [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := elDeref(n.Content[i]), elDeref(n.Content[i+1])
		switch {
		case k == nil:
		case k.Tag == "!!merge" && v != nil && v.Kind == yaml.SequenceNode:
			for _, m := range v.Content {
				out = elAppendPairs(out, elDeref(m), depth+1)
			}
		case k.Tag == "!!merge":
			out = elAppendPairs(out, v, depth+1)
		default:
			own = append(own, [2]*yaml.Node{k, v})
		}
	}
	return append(out, own...)
}

// elField is the value of a mapping's field, its name in snake_case (Envoy
// also reads lowerCamelCase, and so does this).
func elField(n *yaml.Node, name string) *yaml.Node {
	if n = elDeref(n); n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	var out *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := elDeref(n.Content[i])
		switch {
		case k == nil:
		case k.Tag == "!!merge":
			return elMergedField(n, name)
		case elFieldIs(k.Value, name):
			out = elDeref(n.Content[i+1])
		}
	}
	return out
}

// elMergedField is elField of a mapping with merge keys.
func elMergedField(n *yaml.Node, name string) *yaml.Node {
	var out *yaml.Node
	for _, kv := range elPairs(n) {
		if elFieldIs(kv[0].Value, name) {
			out = kv[1]
		}
	}
	return out
}

// elFieldIs tells whether key, in snake_case or lowerCamelCase, is the
// field name (snake_case), without allocating.
func elFieldIs(key, name string) bool {
	j := 0
	for i := 0; i < len(key); i++ {
		ch := key[i]
		if 'A' <= ch && ch <= 'Z' {
			if i > 0 {
				if j >= len(name) || name[j] != '_' {
					return false
				}
				j++
			}
			ch += 'a' - 'A'
		}
		if j >= len(name) || name[j] != ch {
			return false
		}
		j++
	}
	return j == len(name)
}

func elSnakeCase(s string) string {
	if strings.ToLower(s) == s {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if 'A' <= r && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// elStr is a scalar's text ("" for anything else).
func elStr(n *yaml.Node) string {
	if n = elDeref(n); n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}

// elWrapped opens a protobuf wrapper ({value: x}), which JSON writes as x.
func elWrapped(n *yaml.Node) *yaml.Node {
	if elIsMapping(n) {
		return elField(n, "value")
	}
	return n
}

// elItems are a sequence's elements (none for anything else).
func elItems(n *yaml.Node) []*yaml.Node {
	if n = elDeref(n); n != nil && n.Kind == yaml.SequenceNode {
		return n.Content
	}
	return nil
}

func elIsMapping(n *yaml.Node) bool {
	n = elDeref(n)
	return n != nil && n.Kind == yaml.MappingNode
}

func elIsSequence(n *yaml.Node) bool {
	n = elDeref(n)
	return n != nil && n.Kind == yaml.SequenceNode
}

func elJoin(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func elIndex(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// elAt names a place for an error: its path and line.
func elAt(n *yaml.Node, path string) string {
	if path == "" {
		path = "config"
	}
	if n = elDeref(n); n != nil && n.Line > 0 {
		return fmt.Sprintf("%s (line %d)", path, n.Line)
	}
	return path
}

// elBoolOf reads a boolean (absent: false).
func elBoolOf(n *yaml.Node, path string) (bool, error) {
	if n = elDeref(n); n == nil {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(elStr(n)))
	if err != nil {
		return false, fmt.Errorf("%s: want true or false", elAt(n, path))
	}
	return b, nil
}

// elIntOf reads a whole number from lo to hi (protobuf's JSON also writes
// them as strings).
func elIntOf(n *yaml.Node, path string, lo, hi int) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(elStr(n)))
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%s: %q: want a whole number from %d to %d", elAt(n, path), elStr(n), lo, hi)
	}
	return v, nil
}

// elTypeOf is an Any's type URL and value: a TypedStruct (udpa or xds) is
// opened to the type it carries.
func elTypeOf(n *yaml.Node, path string) (typeURL string, value *yaml.Node, valuePath string) {
	n = elDeref(n)
	t := elStr(elField(n, "@type"))
	if strings.HasSuffix(t, "/udpa.type.v1.TypedStruct") || strings.HasSuffix(t, "/xds.type.v3.TypedStruct") {
		return elStr(elField(n, "type_url")), elDeref(elField(n, "value")), elJoin(path, "value")
	}
	return t, n, path
}

func elIsType(typeURL, name string) bool {
	return typeURL == name || strings.HasSuffix(typeURL, "/"+name)
}
