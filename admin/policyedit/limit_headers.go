package policyedit

import (
	"encoding/json"
	"strings"
)

// The rule form edits a limit rule's "limit_headers" as three names: the
// fields its own limit, remaining and reset are sent as.

// limitHeadersOf reads "limit_headers" into the form's three names; a
// member the form has no field for stays in the rule (applyLimitHeaders).
func limitHeadersOf(raw json.RawMessage) (limit, remaining, reset string) {
	o, err := ParseObject(raw)
	if err != nil {
		return "", "", ""
	}
	return o.String("limit"), o.String("remaining"), o.String("reset")
}

// applyLimitHeaders writes the form's names into the rule's
// "limit_headers" (o is the rule before the form), or removes it when all
// three are empty. Other members of the object are kept, for the parser to
// name.
func (f Form) applyLimitHeaders(out *Object, o Object) {
	headers := Object{}
	if v, ok := o.Get("limit_headers"); ok {
		headers, _ = ParseObject(v)
	}
	for _, field := range []struct{ key, name string }{{"limit", f.OwnLimit}, {"remaining", f.OwnRemaining}, {"reset", f.OwnReset}} {
		if name := strings.TrimSpace(field.name); name != "" {
			headers.Set(field.key, name)
		} else {
			headers.Delete(field.key)
		}
	}
	if len(headers) == 0 {
		out.Delete("limit_headers")
		return
	}
	out.Set("limit_headers", headers)
}
