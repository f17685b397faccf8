package policies

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/admin/store"
)

// resetPolicy has rules a reset may name (per-key, pair) and rules it may
// not (in-flight, fleet, office), in two policies for scoped editors.
const resetPolicy = `{"policies":[
 {"name":"payments-api","rules":[
  {"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":5}},
  {"name":"pair","limit_keys":["header:x-api-key","method"],"algorithm":"fixed_window","algorithm_config":{"limit":100,"window_seconds":60}}]},
 {"name":"search","rules":[
  {"name":"in-flight","limit_keys":["header:x-api-key"],"algorithm":"concurrency","algorithm_config":{"limit":3}},
  {"name":"fleet","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","scope":"global","algorithm_config":{"tokens_per_second":1,"burst":5}},
  {"name":"office","limit_keys":["ip:address"],"action":"exempt"},
  {"name":"search-key","limit_keys":["header:x-api-key"],"algorithm":"quota","algorithm_config":{"limit":100,"period":"day"}},
  {"name":"exact","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","max_keys":0,"algorithm_config":{"tokens_per_second":1,"burst":5}}]}],
 "fleet":{"cluster":"rls"}}`

// resetRecorder is a ResetPublisher that keeps what it was handed.
type resetRecorder struct {
	mu   sync.Mutex
	sets [][]PushedReset
}

func (r *resetRecorder) SetResets(_ context.Context, rs []PushedReset) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sets = append(r.sets, rs)
	return nil
}

func (r *resetRecorder) last() []PushedReset {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return nil
	}
	return r.sets[len(r.sets)-1]
}

func resetService(t *testing.T) (*Service, *resetRecorder, *store.Store) {
	t.Helper()
	s, _, st := newService(t)
	if _, err := s.Save(context.Background(), SaveRequest{Base: 1, JSON: []byte(resetPolicy), Author: "ops"}); err != nil {
		t.Fatal(err)
	}
	rec := &resetRecorder{}
	s.SetResetPublisher(rec)
	return s, rec, st
}

func TestAResetIsStoredAndPushedAtOnce(t *testing.T) {
	ctx := context.Background()
	s, rec, _ := resetService(t)
	r, err := s.Reset(ctx, ResetRequest{Rule: "pair", Key: `acme\|x|GET`, Author: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-z]+-[0-9a-f]{6}$`).MatchString(r.ID) || r.Author != "ann" || r.Created.IsZero() {
		t.Errorf("reset %+v: want an id of the time in base 36 and 6 hex digits, the author and the time", r)
	}
	want := []PushedReset{{ID: r.ID, Rule: "pair", Key: `acme\|x|GET`}}
	if got := rec.last(); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("pushed %+v, want %+v", got, want)
	}
	r2, err := s.Reset(ctx, ResetRequest{Rule: "per-key", Key: "bob"})
	if err != nil || r2.ID == r.ID {
		t.Fatalf("second reset %+v, %v", r2, err)
	}
	if got := rec.last(); len(got) != 2 || got[0].ID != r.ID || got[1].ID != r2.ID {
		t.Errorf("pushed %+v, want both resets, oldest first", got)
	}
	list, err := s.Resets(ctx, 10)
	if err != nil || len(list) != 2 || list[0].ID != r2.ID || list[1].Key != `acme\|x|GET` {
		t.Errorf("Resets: %+v, %v; want both, newest first", list, err)
	}
}

func TestAResetIsRefusedNamingTheField(t *testing.T) {
	ctx := context.Background()
	s, rec, _ := resetService(t)
	cases := []struct{ rule, key, field, msg string }{
		{"", "k", "rule", "required"},
		{"per-key", "", "key", "required"},
		{"nope", "k", "rule", "is not a rule"},
		{"in-flight", "k", "rule", "in flight"},
		{"fleet", "k", "rule", "global rule, and this admin runs no rate limit service"},
		{"office", "10.0.0.1", "rule", "keeps no state"},
		{"pair", "acme", "key", "1 values"},
		{"per-key", "a#b", "key", `unescaped "#"`},
	}
	for _, c := range cases {
		_, err := s.Reset(ctx, ResetRequest{Rule: c.rule, Key: c.key})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !strings.Contains(ie.Message, c.msg) {
			t.Errorf("Reset(%q, %q) = %v; want field %s saying %q", c.rule, c.key, err, c.field, c.msg)
		}
	}
	if list, _ := s.Resets(ctx, 10); len(list) != 0 || rec.last() != nil {
		t.Errorf("refused resets were stored (%+v) or pushed (%+v)", list, rec.last())
	}
}

// forgetRecorder is a FleetForgetter that keeps what it was asked, or
// fails with err.
type forgetRecorder struct {
	asked []string
	err   error
}

func (f *forgetRecorder) Forget(_ context.Context, domain, rule, identity string) error {
	f.asked = append(f.asked, domain+" "+rule+" "+identity)
	return f.err
}

func (f *forgetRecorder) ForgetRule(_ context.Context, domain, rule string) error {
	f.asked = append(f.asked, domain+" "+rule+" (every identity)")
	return f.err
}

func TestAGlobalRulesResetHasTheRateLimitServiceForgetFirst(t *testing.T) {
	ctx := context.Background()
	s, rec, _ := resetService(t)
	fg := &forgetRecorder{}
	s.SetFleetForgetter(fg)
	r, err := s.Reset(ctx, ResetRequest{Rule: "fleet", Key: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fg.asked) != 1 || fg.asked[0] != "sluice fleet acme" {
		t.Errorf("asked the service to forget %q, want the fleet's domain, the rule and the key", fg.asked)
	}
	if got := rec.last(); len(got) != 1 || got[0].ID != r.ID {
		t.Errorf("pushed %+v, want the reset", got)
	}
	// A local rule's reset does not ask the service.
	if _, err := s.Reset(ctx, ResetRequest{Rule: "per-key", Key: "acme"}); err != nil || len(fg.asked) != 1 {
		t.Errorf("a local rule's reset: %v, service asked %d times", err, len(fg.asked))
	}
	// The service failing: nothing stored, nothing pushed.
	fg.err = errors.New("backend down")
	if _, err := s.Reset(ctx, ResetRequest{Rule: "fleet", Key: "beta"}); err == nil || !strings.Contains(err.Error(), "nothing was reset") {
		t.Errorf("with the service failing: %v", err)
	}
	if list, _ := s.Resets(ctx, 10); len(list) != 2 {
		t.Errorf("%d resets stored, want the 2 that succeeded", len(list))
	}
}

func TestAScopedEditorResetsOnlyRulesOfItsPolicies(t *testing.T) {
	ctx := context.Background()
	s, _, _ := resetService(t)
	sc, _ := ParseScope("payments-*")
	if _, err := s.Reset(ctx, ResetRequest{Rule: "per-key", Key: "k", Scope: sc}); err != nil {
		t.Errorf("a rule of payments-api: %v", err)
	}
	_, err := s.Reset(ctx, ResetRequest{Rule: "search-key", Key: "k", Scope: sc})
	var se *ScopeError
	if !errors.As(err, &se) || !strings.Contains(se.Error(), `"search"`) {
		t.Errorf("a rule of search: %v, want a scope error naming the policy", err)
	}
}

func TestAPolicyWithResetsIsNotSaved(t *testing.T) {
	ctx := context.Background()
	s, _, _ := resetService(t)
	doc := strings.TrimSuffix(resetPolicy, "}") + `,"resets":[{"id":"x1","rule":"per-key","key":"k"}]}`
	_, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(doc)})
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0].Path != "resets" ||
		ve.Errors[0].Message != "written by the admin's reset command, not part of a policy" {
		t.Fatalf("save with resets: %v", err)
	}
	// With other mistakes too, the resets are named among them.
	bad := strings.Replace(doc, `"burst":5`, `"burst":-1`, 1)
	if _, err := Validate([]byte(bad)); !errors.As(err, &ve) || len(ve.Errors) < 2 || ve.Errors[len(ve.Errors)-1].Path != "resets" {
		t.Errorf("validate with resets and a bad burst: %v", err)
	}
	// A rule or a string merely named "resets" is no reason to refuse.
	named := strings.Replace(resetPolicy, `"name":"office"`, `"name":"resets"`, 1)
	if _, err := Validate([]byte(named)); err != nil {
		t.Errorf("a rule named resets: %v", err)
	}
}

// Two admin processes on one database: a reset added on one is handed to
// the other's publisher by its follow poll, and only once.
func TestSyncPushesResetsAddedByAnotherAdmin(t *testing.T) {
	ctx := context.Background()
	a, _, st := resetService(t)
	stB, err := store.Open(ctx, dirOf(t, st))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stB.Close() })
	b := New(stB, &recorder{}, nil)
	recB := &resetRecorder{}
	b.SetResetPublisher(recB)
	if _, err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Sync(ctx); !ok || err != nil || len(recB.last()) != 0 {
		t.Fatalf("first Sync: %v, %v, %+v; want an empty set handed once", ok, err, recB.last())
	}
	r, err := a.Reset(ctx, ResetRequest{Rule: "per-key", Key: "alice", Author: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Sync(ctx); !ok || err != nil {
		t.Fatalf("Sync after the other's reset: %v, %v", ok, err)
	}
	if got := recB.last(); len(got) != 1 || got[0] != (PushedReset{ID: r.ID, Rule: "per-key", Key: "alice"}) {
		t.Errorf("b pushes %+v, want the reset made on a", got)
	}
	if ok, _ := b.Sync(ctx); ok {
		t.Error("the same resets were handed over twice")
	}
}

// dirOf is the data directory of a SQLite store.
func dirOf(t *testing.T, st *store.Store) string {
	t.Helper()
	p := st.Path()
	return p[:strings.LastIndexByte(p, '/')]
}

// A reset of every identity of a rule is stored, listed and pushed as
// "all": true without a key, beside the resets of one identity.
func TestAResetOfEveryIdentityIsStoredAndPushedWithoutAKey(t *testing.T) {
	ctx := context.Background()
	s, rec, _ := resetService(t)
	one, err := s.Reset(ctx, ResetRequest{Rule: "per-key", Key: "bob", Author: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Reset(ctx, ResetRequest{Rule: "pair", All: true, Author: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if !all.All || all.Key != "" || all.Rule != "pair" || all.Author != "ann" || all.ID == one.ID {
		t.Errorf("reset %+v: want every identity of pair", all)
	}
	want := []PushedReset{{ID: one.ID, Rule: "per-key", Key: "bob"}, {ID: all.ID, Rule: "pair", All: true}}
	if got := rec.last(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("pushed %+v, want %+v", got, want)
	}
	b, _ := json.Marshal(rec.last())
	if string(b) != `[{"id":"`+one.ID+`","rule":"per-key","key":"bob"},{"id":"`+all.ID+`","rule":"pair","all":true}]` {
		t.Errorf("pushed as %s, want the key of one and \"all\": true without a key for the other", b)
	}
	list, err := s.Resets(ctx, 10)
	if err != nil || len(list) != 2 || !list[0].All || list[0].Key != "" || list[1].All {
		t.Errorf("Resets: %+v, %v; want every identity's, then bob's", list, err)
	}
}

// A reset of every identity is checked as the filter's parser checks the
// pushed configuration, and refused naming the request's field: a rule
// of exact storage (whose keys cannot be listed), a key given too, and
// whatever a reset of one identity is refused for.
func TestAResetOfEveryIdentityIsRefusedNamingTheField(t *testing.T) {
	ctx := context.Background()
	s, rec, _ := resetService(t)
	cases := []struct{ rule, key, field, msg string }{
		{"exact", "", "all", `keeps exact storage ("max_keys": 0)`},
		{"per-key", "bob", "key", `must be left out with "all": true`},
		{"", "", "rule", "required"},
		{"nope", "", "rule", "is not a rule"},
		{"in-flight", "", "rule", "in flight"},
		{"office", "", "rule", "keeps no state"},
		{"fleet", "", "rule", "global rule, and this admin runs no rate limit service"},
	}
	for _, c := range cases {
		_, err := s.Reset(ctx, ResetRequest{Rule: c.rule, Key: c.key, All: true})
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != c.field || !strings.Contains(ie.Message, c.msg) {
			t.Errorf("Reset(%q, all, key %q) = %v; want field %s saying %q", c.rule, c.key, err, c.field, c.msg)
		}
	}
	if _, err := s.Reset(ctx, ResetRequest{Rule: "per-key"}); err == nil || !strings.Contains(err.Error(), `unless every identity of the rule is reset ("all")`) {
		t.Errorf("neither a key nor all: %v", err)
	}
	if list, _ := s.Resets(ctx, 10); len(list) != 0 || rec.last() != nil {
		t.Errorf("refused resets were stored (%+v) or pushed (%+v)", list, rec.last())
	}
}

// A global rule's reset of every identity first has the rate limit
// service forget the whole rule; if that fails nothing is stored or
// pushed.
func TestAGlobalRulesResetOfEveryIdentityHasTheServiceForgetTheRuleFirst(t *testing.T) {
	ctx := context.Background()
	s, rec, _ := resetService(t)
	fg := &forgetRecorder{}
	s.SetFleetForgetter(fg)
	r, err := s.Reset(ctx, ResetRequest{Rule: "fleet", All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(fg.asked) != 1 || fg.asked[0] != "sluice fleet (every identity)" {
		t.Errorf("asked the service %q, want the fleet's domain and the rule, every identity", fg.asked)
	}
	if got := rec.last(); len(got) != 1 || got[0] != (PushedReset{ID: r.ID, Rule: "fleet", All: true}) {
		t.Errorf("pushed %+v, want the reset", got)
	}
	if _, err := s.Reset(ctx, ResetRequest{Rule: "search-key", All: true}); err != nil || len(fg.asked) != 1 {
		t.Errorf("a local rule's reset of every identity: %v, service asked %d times", err, len(fg.asked))
	}
	fg.err = errors.New("backend down")
	_, err = s.Reset(ctx, ResetRequest{Rule: "fleet", All: true})
	var ue *UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "the reset was not stored or pushed") {
		t.Errorf("with the service failing: %v, want an UnavailableError", err)
	}
	if list, _ := s.Resets(ctx, 10); len(list) != 2 || len(rec.last()) != 2 {
		t.Errorf("%d resets stored, %d pushed; want the 2 that succeeded", len(list), len(rec.last()))
	}
}

// An editor resets every identity only of the rules of its policies.
func TestAScopedEditorResetsEveryIdentityOnlyOfRulesOfItsPolicies(t *testing.T) {
	ctx := context.Background()
	s, _, _ := resetService(t)
	sc, _ := ParseScope("payments-*")
	if _, err := s.Reset(ctx, ResetRequest{Rule: "per-key", All: true, Scope: sc}); err != nil {
		t.Errorf("a rule of payments-api: %v", err)
	}
	_, err := s.Reset(ctx, ResetRequest{Rule: "search-key", All: true, Scope: sc})
	var se *ScopeError
	if !errors.As(err, &se) || !strings.Contains(se.Error(), `"search"`) {
		t.Errorf("a rule of search: %v, want a scope error naming the policy", err)
	}
}

// With the policy kept in Git (following a file), resets of every
// identity work as resets of one do: they are no change of the policy.
func TestAResetOfEveryIdentityWorksWhenThePolicyFollowsAFile(t *testing.T) {
	ctx := context.Background()
	s, rec, _ := resetService(t)
	dir := t.TempDir()
	writeConfigMap(t, dir, map[string]string{"policy.json": resetPolicy})
	s.FollowFile(FileSource{Policy: filepath.Join(dir, "policy.json")})
	if st := s.LookAtFile(ctx); st.Err != "" {
		t.Fatalf("looking at the file: %+v", st)
	}
	if _, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(resetPolicy)}); err == nil {
		t.Fatal("a save was accepted while the policy follows a file")
	}
	r, err := s.Reset(ctx, ResetRequest{Rule: "per-key", All: true, Author: "oncall"})
	if err != nil {
		t.Fatalf("a reset of every identity of a policy kept in Git: %v", err)
	}
	if got := rec.last(); len(got) != 1 || got[0] != (PushedReset{ID: r.ID, Rule: "per-key", All: true}) {
		t.Errorf("pushed %+v, want the reset", got)
	}
}
