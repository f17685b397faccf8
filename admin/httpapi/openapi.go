package httpapi

import (
	_ "embed"
	"net/http"
	"sync"

	"sigs.k8s.io/yaml"
)

// openAPIYAML is the OpenAPI document of the JSON API. It is written by
// hand next to the handlers; the package's tests check every route and
// every response the tests provoke against it, so it cannot drift.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIJSON is the document as JSON, converted once on first request:
// the YAML is the one source, and tools that read only JSON get the same.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) { return yaml.YAMLToJSON(openAPIYAML) })

// registerOpenAPI serves the document behind the same bearer
// authentication as the other reads: it describes the API, and whoever
// may call the API may read how.
func (s *server) registerOpenAPI(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/openapi.yaml", s.api(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(openAPIYAML)
		return nil
	}))
	mux.Handle("GET /api/v1/openapi.json", s.api(func(w http.ResponseWriter, r *http.Request) error {
		b, err := openAPIJSON()
		if err != nil {
			return err // a broken embedded document: 500, and the tests fail first
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
		return nil
	}))
}
