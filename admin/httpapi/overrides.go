package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/sluice-rl/sluice/admin/policies"
)

// apiOverrides is POST /api/v1/policy/overrides: it merges a CSV of
// per-identity overrides into a named rule of a draft (default: the current
// version) and answers the merged configuration, validated by the filter's
// parser. It saves nothing: POST /api/v1/policy saves the answer.
func (s *server) apiOverrides(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Rule    string          `json:"rule"`
		CSV     string          `json:"csv"`
		Policy  json.RawMessage `json:"policy"`
		Replace bool            `json:"replace"`
	}
	if err := s.decodeJSON(w, r, &b, []string{"rule", "csv", "policy", "replace"}); err != nil {
		return err
	}
	if b.Rule == "" {
		return &policies.InputError{Field: "rule", Message: "required: the name of the rule that gets the overrides"}
	}
	if b.CSV == "" {
		return &policies.InputError{Field: "csv", Message: "required: the overrides as CSV, a header line key,<limits> then one line per identity"}
	}
	answer := map[string]any{}
	doc := []byte(b.Policy)
	if len(doc) == 0 || string(doc) == "null" {
		cur, err := s.Policies.Current(r.Context()) // secrets masked: a save restores them
		if err != nil {
			return err
		}
		doc = cur.JSON
		answer["base_version"] = cur.Number
	}
	merged, st, err := policies.MergeOverridesCSV(doc, b.Rule, []byte(b.CSV), b.Replace)
	if err != nil {
		return err
	}
	answer["policy"] = json.RawMessage(merged)
	answer["added"], answer["replaced"], answer["total"] = st.Added, st.Replaced, st.Total
	writeJSON(w, http.StatusOK, answer)
	return nil
}
