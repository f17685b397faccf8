package policies

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/policyedit"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
)

// Resetting a client: an operator makes every Envoy forget one identity's
// state under one rule (a lockout, a burnt quota, a debt), or every
// identity's (a limit that misfired: the rule starts over). The only
// channel to every Envoy's shared data is the configuration pushed over
// ECDS, so a reset is stored here and the publisher adds the recent ones
// to whatever it pushes, as the configuration's "resets" member; saved
// versions never hold one.

// ResetWindow is how long a reset keeps being pushed: the resets created
// within this time of the newest one. Measured from the newest reset, not
// from the clock, so every replica composes the same configuration.
const ResetWindow = 15 * time.Minute

// Reset is a stored reset.
type Reset struct {
	ID      string
	Created time.Time
	Author  string
	Rule    string // the rule whose state is forgotten
	Key     string // the identity, as an override's key names it ("" with All)
	All     bool   // every identity of the rule
}

// PushedReset is a reset as the pushed configuration carries it: with a
// key, or "all": true and no key.
type PushedReset struct {
	ID   string `json:"id"`
	Rule string `json:"rule"`
	Key  string `json:"key,omitempty"`
	All  bool   `json:"all,omitempty"`
}

// ResetPublisher adds resets to every configuration it pushes (admin/xds).
type ResetPublisher interface {
	SetResets(ctx context.Context, rs []PushedReset) error
}

// resetStore is the storage of resets (admin/store implements it).
type resetStore interface {
	AddReset(ctx context.Context, r store.Reset) error
	Resets(ctx context.Context, limit int) ([]store.Reset, error)
	ResetWindow(ctx context.Context, window time.Duration, limit int) ([]store.Reset, error)
	ResetsMark(ctx context.Context) (string, error)
}

// ResetRequest asks to reset the state of Key under Rule, or with All
// (and no Key) the state of every identity of Rule.
type ResetRequest struct {
	Rule, Key string
	All       bool
	Author    string
	Scope     Scope // the policies the author may change (empty: all)
}

// SetResetPublisher makes p receive the current resets (SyncResets).
func (s *Service) SetResetPublisher(p ResetPublisher) { s.resetPub = p }

// FleetForgetter forgets state in the fleet's rate limit service
// (admin/fleet.Server): a global rule's bucket and window counts of one
// identity (Forget), or of every identity of the rule (ForgetRule).
type FleetForgetter interface {
	Forget(ctx context.Context, domain, rule, identity string) error
	ForgetRule(ctx context.Context, domain, rule string) error
}

// SetFleetForgetter lets resets of global rules clear the rate limit
// service's state through f. Without one, they are refused.
func (s *Service) SetFleetForgetter(f FleetForgetter) { s.forgetter = f }

// Reset checks that the current version's rule Rule keeps state that Key
// names (with All: that the filter can list its identities) and that
// Scope allows its policy, has the rate limit service forget a global
// rule's state, stores the reset and pushes it at once. Errors:
// *InputError (field "rule", "key" or "all"), *ScopeError,
// *UnavailableError (the fleet's backend failed: nothing stored).
func (s *Service) Reset(ctx context.Context, r ResetRequest) (Reset, error) {
	st, ok := s.store.(resetStore)
	if !ok {
		return Reset{}, errors.New("this admin's store keeps no resets")
	}
	author, _, err := cleanMeta(r.Author, "")
	if err != nil {
		return Reset{}, err
	}
	cfg, err := s.checkReset(ctx, r)
	if err != nil {
		return Reset{}, err
	}
	if err := s.forgetGlobal(ctx, cfg, r); err != nil {
		return Reset{}, err
	}
	now := s.now()
	out := Reset{ID: newResetID(now), Rule: r.Rule, Key: r.Key, All: r.All, Author: author, Created: now.UTC()}
	if err := st.AddReset(ctx, store.Reset(out)); err != nil {
		return Reset{}, err
	}
	if r.All {
		s.log.Info("reset every identity of a rule", "rule", r.Rule, "author", author, "id", out.ID)
	} else {
		s.log.Info("reset a client", "rule", r.Rule, "author", author, "id", out.ID)
	}
	// Stored: a failed push is logged, and the next follow tick retries.
	if _, err := s.SyncResets(ctx); err != nil {
		s.log.Error("pushing the resets failed", "err", err)
	}
	return out, nil
}

// checkReset checks a reset against the current version with the
// filter's own parser, as the Envoys will: the rule must keep state per
// identity, and the key must name one of its identities, or with All the
// rule must keep bounded storage (whose identities the filter can list)
// and no key be given. It returns the current configuration as parsed.
func (s *Service) checkReset(ctx context.Context, r ResetRequest) (*policy.Config, error) {
	if r.Rule == "" {
		return nil, &InputError{Field: "rule", Message: "required: the name of the rule whose state to reset"}
	}
	if r.Key == "" && !r.All {
		return nil, &InputError{Field: "key", Message: `required: the identity, written as an override's key (limit_keys values joined by |), unless every identity of the rule is reset ("all")`}
	}
	cur, err := s.store.Current(ctx)
	if err != nil {
		return nil, err
	}
	doc, err := withResets(cur.JSON, []PushedReset{{ID: "check", Rule: r.Rule, Key: r.Key, All: r.All}})
	if err != nil {
		return nil, err
	}
	cfg, err := policy.Parse(doc)
	if err != nil {
		return nil, resetInputError(err)
	}
	rule := cfg.RuleByName(r.Rule)
	if rule != nil && rule.Global && s.forgetter == nil {
		// Forgetting the Envoys' lease pools alone would leave the
		// identity's state in the rate limit service.
		return nil, &InputError{Field: "rule", Message: fmt.Sprintf("%q is a global rule, and this admin runs no rate limit service that could forget its state (start it with a fleet backend)", r.Rule)}
	}
	if rule != nil && !r.Scope.Allows(rule.Policy) {
		return nil, &ScopeError{Scope: r.Scope, Changes: []string{fmt.Sprintf("the rule %q is in the policy %q", r.Rule, rule.Policy)}}
	}
	return cfg, nil
}

// forgetGlobal has the rate limit service forget the identity (with All:
// every identity of the rule) when r's rule is global, before the reset
// is stored and pushed: the Envoys then drop their lease pools, and their
// next asks find nothing. cfg is the configuration checkReset parsed.
func (s *Service) forgetGlobal(ctx context.Context, cfg *policy.Config, r ResetRequest) error {
	rule := cfg.RuleByName(r.Rule)
	if rule == nil || !rule.Global || cfg.Fleet == nil {
		return nil
	}
	if r.All {
		if err := s.forgetter.ForgetRule(ctx, cfg.Fleet.Domain, r.Rule); err != nil {
			return &UnavailableError{What: "the rate limit service could not forget the rule's state (the reset was not stored or pushed, though some identities may be forgotten already; try again)", Err: err}
		}
		return nil
	}
	if err := s.forgetter.Forget(ctx, cfg.Fleet.Domain, r.Rule, r.Key); err != nil {
		return &UnavailableError{What: "the rate limit service could not forget the identity (nothing was reset; try again)", Err: err}
	}
	return nil
}

// UnavailableError is a refusal because a service the admin needs (the
// fleet's backend) failed: the request may succeed later.
type UnavailableError struct {
	What string
	Err  error
}

func (e *UnavailableError) Error() string { return e.What + ": " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// withResets returns the configuration doc with rs as its "resets".
func withResets(doc []byte, rs []PushedReset) ([]byte, error) {
	root, err := policyedit.ParseObject(doc)
	if err != nil {
		return nil, err
	}
	root.Set("resets", rs)
	return root.MarshalJSON()
}

// resetInputError turns the parser's refusal of the one reset checked
// into an error naming the request's field ("resets[0].key" is "key").
func resetInputError(err error) error {
	var es policy.Errors
	if !errors.As(err, &es) {
		return err
	}
	for _, e := range es {
		if field, ok := strings.CutPrefix(e.Path, "resets[0]."); ok {
			return &InputError{Field: field, Message: e.Message}
		}
	}
	return fmt.Errorf("the current policy is refused by the filter: %w", err)
}

// newResetID is unique across replicas without coordination: the time in
// milliseconds (base 36) and 24 random bits.
func newResetID(now time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return strconv.FormatInt(now.UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}

// Resets returns up to limit resets, newest first.
func (s *Service) Resets(ctx context.Context, limit int) ([]Reset, error) {
	st, ok := s.store.(resetStore)
	if !ok {
		return nil, nil
	}
	rs, err := st.Resets(ctx, limit)
	out := make([]Reset, len(rs))
	for i, r := range rs {
		out[i] = Reset(r)
	}
	return out, err
}

// SyncResets hands the publisher the resets of the window when the
// database has new ones (added here or by another admin replica). It
// reports whether it did.
func (s *Service) SyncResets(ctx context.Context) (bool, error) {
	st, ok := s.store.(resetStore)
	if !ok || s.resetPub == nil {
		return false, nil
	}
	s.resetMu.Lock()
	defer s.resetMu.Unlock()
	mark, err := st.ResetsMark(ctx)
	if err != nil || mark == s.resetMark {
		return false, err
	}
	pushed, err := s.PushedResets(ctx)
	if err != nil {
		return false, err
	}
	if err := s.resetPub.SetResets(ctx, pushed); err != nil {
		return false, err
	}
	s.resetMark = mark
	return true, nil
}

// PushedResets returns the resets every configuration carries now: those
// made within ResetWindow of the newest, at most policy.MaxResets, as
// pushed over xDS and as the exported manifests (Istio, Envoy Gateway)
// carry them.
func (s *Service) PushedResets(ctx context.Context) ([]PushedReset, error) {
	st, ok := s.store.(resetStore)
	if !ok {
		return nil, nil
	}
	window, err := st.ResetWindow(ctx, ResetWindow, policy.MaxResets)
	if err != nil {
		return nil, err
	}
	pushed := make([]PushedReset, len(window))
	for i, r := range window {
		pushed[i] = PushedReset{ID: r.ID, Rule: r.Rule, Key: r.Key, All: r.All}
	}
	return pushed, nil
}

// refuseResets refuses a document with a top-level "resets": only the
// admin's reset command writes one, in what it pushes, never in a policy.
func refuseResets(doc []byte) *policy.FieldError {
	if !bytes.Contains(doc, []byte(`"resets"`)) {
		return nil // the common case, without decoding
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(doc, &top) != nil {
		return nil // the parser says what is wrong
	}
	if _, ok := top["resets"]; !ok {
		return nil
	}
	return &policy.FieldError{Path: "resets", Message: "written by the admin's reset command, not part of a policy"}
}
