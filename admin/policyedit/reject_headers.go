package policyedit

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// The rule form edits "reject_headers" as lines of text, "name: value"
// each, in the order written: easier to type than an object, and a value
// may hold colons (only the first one separates).

// headersText writes a rule's "reject_headers" as the form's lines.
func headersText(raw json.RawMessage) string {
	o, err := ParseObject(raw)
	if err != nil {
		return string(raw) // not an object: shown as written, refused on apply by the parser's message
	}
	var b strings.Builder
	for _, m := range o {
		var v string
		if json.Unmarshal(m.Value, &v) != nil {
			v = string(m.Value)
		}
		b.WriteString(m.Key + ": " + v + "\n")
	}
	return b.String()
}

// applyRejectHeaders writes the rule's own "reject_headers" from the form's
// lines (an empty object when its box is ticked and it has none), or
// removes them: unticked and empty, or a rule that rejects nothing. A name
// given twice is kept twice, for the parser to name.
func (f Form) applyRejectHeaders(out *Object, action string, errs *[]FieldError) {
	if !f.OwnHeaders || policy.RejectsNothing(action) {
		out.Delete("reject_headers")
		return
	}
	headers := Object{}
	for i, line := range strings.Split(f.RejectHeaders, "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			*errs = append(*errs, FieldError{Field: "reject_headers",
				Message: "line " + strconv.Itoa(i+1) + ": write name: value, such as x-local-rate-limit: true"})
			continue
		}
		v, _ := json.Marshal(strings.TrimSpace(value))
		headers = append(headers, Member{Key: strings.TrimSpace(name), Value: v})
	}
	out.Set("reject_headers", headers)
}
