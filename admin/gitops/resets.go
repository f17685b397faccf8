package gitops

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// resetJSON is a reset as the API answers it (the key masked).
type resetJSON struct {
	ID      string `json:"id"`
	Rule    string `json:"rule"`
	Key     string `json:"key"`
	Author  string `json:"author"`
	Created string `json:"created"`
}

// reset is `reset -rule RULE KEY`: every Envoy forgets KEY's state under
// RULE (POST /api/v1/resets). A refusal naming the rule or the key exits 1.
func (c *client) reset(ctx context.Context, rule string, positional []string, stdout io.Writer) (int, error) {
	if len(positional) != 1 || rule == "" {
		return ExitError, fmt.Errorf(`reset: give -rule RULE and the identity's key, written as an override's key ("alice", or "alice|GET" for two limit keys)`)
	}
	var out resetJSON
	status, e, err := c.do(ctx, "POST", "/api/v1/resets", map[string]string{"rule": rule, "key": positional[0]}, &out)
	switch {
	case err != nil:
		return ExitError, err
	case status == http.StatusBadRequest:
		fmt.Fprintf(stdout, "not reset: %v: %v\n", e["field"], e["error"])
		return ExitChanges, nil
	case e != nil:
		return ExitError, fmt.Errorf("POST /api/v1/resets: %d: %v", status, e["error"])
	}
	fmt.Fprintf(stdout, "reset %s under %s (%s): each Envoy forgets its state at the next push\n", out.Key, out.Rule, out.ID)
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
		fmt.Fprintf(stdout, "%s %s by %s: %s under %s\n", r.ID, r.Created, r.Author, r.Key, r.Rule)
	}
	if len(out.Resets) == 0 {
		fmt.Fprintln(stdout, "no client was reset")
	}
	return ExitOK, nil
}
