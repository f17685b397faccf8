package gitops

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// resetJSON is a reset as the API answers it (the key masked; none with
// All).
type resetJSON struct {
	ID      string `json:"id"`
	Rule    string `json:"rule"`
	Key     string `json:"key"`
	All     bool   `json:"all"`
	Author  string `json:"author"`
	Created string `json:"created"`
}

// what says whose state r reset.
func (r resetJSON) what() string {
	if r.All {
		return "every identity under " + r.Rule
	}
	return r.Key + " under " + r.Rule
}

// reset is `reset -rule RULE KEY`: every Envoy forgets KEY's state under
// RULE (POST /api/v1/resets); with all (`-all`, no KEY), every identity's
// state under RULE. A refusal naming the rule, the key or all exits 1.
func (c *client) reset(ctx context.Context, rule string, all bool, positional []string, stdout io.Writer) (int, error) {
	switch {
	case all && len(positional) != 0:
		return ExitError, fmt.Errorf("reset: -all resets every identity of the rule; give no key with it (got %q)", positional[0])
	case rule == "" || (!all && len(positional) != 1):
		return ExitError, fmt.Errorf(`reset: give -rule RULE and the identity's key, written as an override's key ("alice", or "alice|GET" for two limit keys), or -rule RULE -all for every identity`)
	}
	body := map[string]any{"rule": rule}
	if all {
		body["all"] = true
	} else {
		body["key"] = positional[0]
	}
	var out resetJSON
	status, e, err := c.do(ctx, "POST", "/api/v1/resets", body, &out)
	switch {
	case err != nil:
		return ExitError, err
	case status == http.StatusBadRequest:
		fmt.Fprintf(stdout, "not reset: %v\n", e["error"]) // "field: why"
		return ExitChanges, nil
	case e != nil:
		return ExitError, fmt.Errorf("POST /api/v1/resets: %d: %v", status, e["error"])
	}
	fmt.Fprintf(stdout, "reset %s (%s): each Envoy forgets its state at the next push\n", out.what(), out.ID)
	return ExitOK, nil
}

// resets is `resets`: the recent resets, newest first, keys masked.
func (c *client) resets(ctx context.Context, stdout io.Writer) (int, error) {
	var out struct {
		Resets []resetJSON `json:"resets"`
	}
	status, e, err := c.do(ctx, "GET", "/api/v1/resets", nil, &out)
	if err != nil {
		return ExitError, err
	}
	if e != nil {
		return ExitError, fmt.Errorf("GET /api/v1/resets: %d: %v", status, e["error"])
	}
	for _, r := range out.Resets {
		fmt.Fprintf(stdout, "%s %s by %s: %s\n", r.ID, r.Created, r.Author, r.what())
	}
	if len(out.Resets) == 0 {
		fmt.Fprintln(stdout, "no client was reset")
	}
	return ExitOK, nil
}
