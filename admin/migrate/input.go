// Package migrate turns another rate limiter's configuration into a Sluice
// policy. EnvoyRatelimit converts envoyproxy/ratelimit's: the service's
// YAML (a domain and its descriptor tree) and the Envoy route's
// rate_limits actions, which say what request attribute each descriptor
// key is. docs/migrating.md describes the mapping and what differs.
package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// The envoyproxy/ratelimit configuration (its config.yaml), as the
// service reads it.
type serviceConfig struct {
	Domain      string       `yaml:"domain"`
	Descriptors []descriptor `yaml:"descriptors"`
}

type descriptor struct {
	Key         string       `yaml:"key"`
	Value       string       `yaml:"value"`
	RateLimit   *rateLimit   `yaml:"rate_limit"`
	Descriptors []descriptor `yaml:"descriptors"`
	ShadowMode  bool         `yaml:"shadow_mode"`
	// A value ending with "*" is a wildcard: the values starting with
	// the rest, each its own counter, or one shared (ShareThreshold).
	ShareThreshold bool `yaml:"share_threshold"`
	QuotaMode      bool `yaml:"quota_mode"`
	// Statistics options of the service: nothing to convert.
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
}

type rateLimit struct {
	Unit            string    `yaml:"unit"`
	RequestsPerUnit *uint32   `yaml:"requests_per_unit"`
	Unlimited       bool      `yaml:"unlimited"`
	Name            string    `yaml:"name"`
	Replaces        []replace `yaml:"replaces"`
	UnitMultiplier  *uint32   `yaml:"unit_multiplier"`
}

type replace struct {
	Name string `yaml:"name"`
}

// The Envoy route's (or virtual host's) rate_limits: each entry's actions
// build one descriptor.
type routeRateLimit struct {
	Actions           []action `yaml:"actions"`
	Stage             *int     `yaml:"stage"`
	DisableKey        string   `yaml:"disable_key"`
	Limit             any      `yaml:"limit"`
	HitsAddend        any      `yaml:"hits_addend"`
	ApplyOnStreamDone bool     `yaml:"apply_on_stream_done"`
}

type action struct {
	RequestHeaders      *requestHeaders  `yaml:"request_headers"`
	RemoteAddress       *struct{}        `yaml:"remote_address"`
	GenericKey          *genericKey      `yaml:"generic_key"`
	QueryParameters     *queryParameters `yaml:"query_parameters"`
	Metadata            *metadataAction  `yaml:"metadata"`
	DynamicMetadata     *metadataAction  `yaml:"dynamic_metadata"`
	HeaderValueMatch    any              `yaml:"header_value_match"`
	DestinationCluster  any              `yaml:"destination_cluster"`
	SourceCluster       any              `yaml:"source_cluster"`
	MaskedRemoteAddress any              `yaml:"masked_remote_address"`
	QueryParameterValue any              `yaml:"query_parameter_value_match"`
	Extension           any              `yaml:"extension"`
}

type requestHeaders struct {
	HeaderName    string `yaml:"header_name"`
	DescriptorKey string `yaml:"descriptor_key"`
	SkipIfAbsent  bool   `yaml:"skip_if_absent"`
}

type genericKey struct {
	DescriptorValue string `yaml:"descriptor_value"`
	DescriptorKey   string `yaml:"descriptor_key"`
}

type queryParameters struct {
	QueryParameterName string `yaml:"query_parameter_name"`
	DescriptorKey      string `yaml:"descriptor_key"`
	SkipIfAbsent       bool   `yaml:"skip_if_absent"`
}

type metadataAction struct {
	DescriptorKey string `yaml:"descriptor_key"`
	MetadataKey   struct {
		Key  string `yaml:"key"`
		Path []struct {
			Key string `yaml:"key"`
		} `yaml:"path"`
	} `yaml:"metadata_key"`
	DefaultValue string `yaml:"default_value"`
	Source       string `yaml:"source"`
	SkipIfAbsent bool   `yaml:"skip_if_absent"`
}

// maxInput bounds each document: a configuration larger than the admin
// accepts as a policy (3 MiB) would not convert to one it can store.
const maxInput = 4 << 20

// decodeStrict decodes one YAML document into v, refusing unknown fields
// (a misspelt field would otherwise be silently dropped). what names the
// document in errors.
func decodeStrict(what string, doc []byte, v any) error {
	if len(doc) > maxInput {
		return fmt.Errorf("%s: %d bytes, more than the %d a conversion reads", what, len(doc), maxInput)
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s: empty", what)
		}
		return fmt.Errorf("%s: %s", what, yamlError(err))
	}
	return nil
}

// inType is the Go type yaml.v3 names in its messages ("field x not found
// in type migrate.descriptor"): the user's file has no such thing.
var inType = regexp.MustCompile(` in type [\w.\[\]*]+`)

// yamlError says what yaml.v3 found wrong, each problem with its line,
// in the file's words: without the Go types it decodes into ("a mapping
// where a list belongs", not "[]migrate.kongRoute").
func yamlError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msg = strings.Join(te.Errors, "; ")
	}
	msg = unmarshalMsg.ReplaceAllStringFunc(msg, func(m string) string {
		sub := unmarshalMsg.FindStringSubmatch(m)
		return fmt.Sprintf("a %s where %s belongs", yamlKind(sub[1]), goKind(sub[2]))
	})
	return inType.ReplaceAllString(msg, "")
}

// parseRateLimits reads the route's rate_limits: a list, or an object with
// a rate_limits member (a route action's or virtual host's configuration,
// whose other members are not read).
func parseRateLimits(doc []byte) ([]routeRateLimit, error) {
	var probe yaml.Node
	if err := yaml.Unmarshal(doc, &probe); err != nil {
		return nil, fmt.Errorf("rate_limits: %s", yamlError(err))
	}
	if len(probe.Content) == 1 && probe.Content[0].Kind == yaml.MappingNode {
		m := probe.Content[0]
		var list *yaml.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "rate_limits" {
				list = m.Content[i+1]
			}
		}
		if list == nil {
			return nil, fmt.Errorf("rate_limits: the object has no rate_limits member; give the route's (or virtual host's) rate_limits, or the list itself")
		}
		// The list alone, decoded strictly: its line numbers count from
		// the list's first line.
		var err error
		if doc, err = yaml.Marshal(list); err != nil {
			return nil, fmt.Errorf("rate_limits: %w", err)
		}
	}
	var out []routeRateLimit
	if err := decodeStrict("rate_limits", doc, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// unmarshalMsg is yaml.v3's message on a value of the wrong kind, which
// names the Go type it decodes into.
var unmarshalMsg = regexp.MustCompile("cannot unmarshal !!(\\w+)(?: `[^`]*`)? into ([\\w.\\[\\]*]+)")

// yamlKind names a YAML tag as the file's author knows it.
func yamlKind(tag string) string {
	switch tag {
	case "map":
		return "mapping"
	case "seq":
		return "list"
	case "str":
		return "string"
	case "int", "float":
		return "number"
	}
	return tag
}

// goKind says what a Go type the file decodes into holds.
func goKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case strings.HasPrefix(goType, "map["), strings.HasPrefix(goType, "migrate."), strings.HasPrefix(goType, "struct"):
		return "a mapping"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	}
	return "a number"
}
