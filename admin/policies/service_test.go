package policies

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
)

type recorder struct {
	mu   sync.Mutex
	got  []Version
	fail error
}

func (r *recorder) Publish(_ context.Context, v Version) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, v)
	return r.fail
}

func (r *recorder) numbers() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, v := range r.got {
		out = append(out, v.Number)
	}
	return out
}

func newService(t *testing.T) (*Service, *recorder, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pub := &recorder{}
	s := New(st, pub, nil)
	if _, err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, pub, st
}

const perIP = `{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`

func TestStartCreatesAndPublishesDefault(t *testing.T) {
	ctx := context.Background()
	s, pub, st := newService(t)
	cur, err := s.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Number != 1 || cur.Author != "sluice" || !strings.Contains(cur.Message, "default") {
		t.Errorf("v1 = %+v", cur)
	}
	cfg, err := policy.Parse(cur.JSON)
	if err != nil {
		t.Fatalf("the default policy does not parse: %v", err)
	}
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			if r.Mode != policy.ModeShadow {
				t.Errorf("default rule %s is %s; the default must never reject", r.Name, r.Mode)
			}
		}
	}
	if fmt.Sprint(pub.numbers()) != "[1]" {
		t.Errorf("published %v at start", pub.numbers())
	}
	// A restart publishes the current version and creates nothing.
	s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP)})
	pub2 := &recorder{}
	v, err := New(st, pub2, nil).Start(ctx)
	if err != nil || v.Number != 2 || fmt.Sprint(pub2.numbers()) != "[2]" {
		t.Errorf("restart: %d %v published %v", v.Number, err, pub2.numbers())
	}
}

func TestStartFailsWhenPublishFails(t *testing.T) {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := New(st, &recorder{fail: errors.New("boom")}, nil)
	if _, err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Start = %v", err)
	}
	if ps := s.LastPublish(); ps.Version != 1 || ps.Err == nil {
		t.Errorf("LastPublish = %+v", ps)
	}
}

func TestSaveNormalizesStoresPublishes(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	clock := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	s.SetClock(func() time.Time { return clock })
	v, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "  alice ", Message: " tighter\r\nlimits "})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := policy.Parse([]byte(perIP))
	norm, _ := cfg.MarshalJSON()
	if v.Number != 2 || v.Parent != 1 || string(v.JSON) != string(norm) || v.Author != "alice" || v.Message != "tighter\nlimits" || !v.Created.Equal(clock) {
		t.Errorf("saved %+v", v)
	}
	if got, _ := s.Get(ctx, 2); !reflect.DeepEqual(got, v) {
		t.Errorf("Get(2) = %+v, want %+v", got, v)
	}
	if fmt.Sprint(pub.numbers()) != "[1 2]" || string(pub.got[1].JSON) != string(norm) {
		t.Errorf("published %v", pub.numbers())
	}
	if !strings.Contains(v.Pretty(), "\n  \"policies\": [\n") {
		t.Errorf("Pretty:\n%s", v.Pretty())
	}
	// Default author.
	v3, _ := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIP)})
	if v3.Author != "admin" {
		t.Errorf("default author %q", v3.Author)
	}
}

// TestInvalidRefusedWithParserMessages: every invalid configuration is
// refused with exactly the errors shared/policy.Parse gives (what the filter
// logs), and nothing is stored or published.
func TestInvalidRefusedWithParserMessages(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	cases := []string{
		``,
		`{"rules": x}`,
		`[]`,
		`{"mode":"audit","rules":[]}`,
		`{"rules":[{"name":"free","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":5}},
		  {"name":"free","limit_keys":["form:session"],"algorithm":"leaky_bucket","algorithm_config":{"rps":1,"burst":1}}]}`,
		`{"rules":[{"name":"r","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10,"bursts":1}}]}`,
		`{"rules":[{"name":"r","limit_keys":["ip:address"],"match":{"jwt:plan":1},"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`,
		// Windowed algorithms: the same parser, the same paths.
		`{"rules":[{"name":"r","limit_keys":["ip:address"],"algorithm":"rolling_window","algorithm_config":{"limit":10000,"window_seconds":86400,"period_seconds":7}}]}`,
		`{"rules":[{"name":"r","limit_keys":["ip:address"],"algorithm":"rolling_window","algorithm_config":{"limit":10,"window_seconds":60,"period_seconds":10,"max_per_period":20}}]}`,
		`{"rules":[{"name":"r","limit_keys":["ip:address"],"algorithm":"fixed_window","algorithm_config":{"window_seconds":60,"rps":1}}]}`,
		// Not UTF-8 (Latin-1 "café"): it could not be pushed to Envoy.
		"{\"rules\":[{\"name\":\"r\",\"limit_keys\":[\"ip:address\"],\"match\":{\"header:x-plan\":\"caf\xe9\"},\"algorithm\":\"token_bucket\",\"algorithm_config\":{\"rps\":5,\"burst\":10}}]}",
	}
	for _, in := range cases {
		_, want := policy.Parse([]byte(in))
		if want == nil {
			t.Fatalf("test case parses: %s", in)
		}
		_, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(in), Message: "bad"})
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("%s: Save = %v, want a ValidationError", in, err)
		}
		if !reflect.DeepEqual(ve.Errors, want.(policy.Errors)) {
			t.Errorf("%s:\n got %v\nwant %v", in, ve.Errors, want)
		}
		if !strings.Contains(err.Error(), want.Error()) {
			t.Errorf("message %q does not contain the parser's %q", err, want)
		}
	}
	big := `{"rules":[` + strings.Repeat(" ", MaxConfigBytes) + `]}`
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(big)}); err == nil || !strings.Contains(err.Error(), "limit is") {
		t.Errorf("oversized: %v", err)
	}
	if cur, _ := s.Current(ctx); cur.Number != 1 {
		t.Errorf("an invalid configuration was stored: current is %d", cur.Number)
	}
	if fmt.Sprint(pub.numbers()) != "[1]" {
		t.Errorf("published %v", pub.numbers())
	}
}

func TestSaveInputErrors(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	for _, c := range []struct {
		req   SaveRequest
		field string
	}{
		{SaveRequest{Base: -1, JSON: []byte(perIP)}, "base_version"},
		{SaveRequest{Base: 1, JSON: []byte(perIP), Author: strings.Repeat("a", MaxAuthorLen+1)}, "author"},
		{SaveRequest{Base: 1, JSON: []byte(perIP), Author: "a\x00b"}, "author"},
		{SaveRequest{Base: 1, JSON: []byte(perIP), Author: "a\nb"}, "author"},
		{SaveRequest{Base: 1, JSON: []byte(perIP), Message: strings.Repeat("m", MaxMessageLen+1)}, "message"},
		{SaveRequest{Base: 1, JSON: []byte(perIP), Message: "bell\a"}, "message"},
		{SaveRequest{Base: 1, JSON: []byte(perIP), Message: "\xff"}, "message"},
	} {
		_, err := s.Save(ctx, c.req)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%+v: %v, want an InputError on %s", c.req.Author+c.req.Message, err, c.field)
		}
	}
}

func TestConflictNamesCurrentVersion(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(DefaultConfig), Author: "bob"})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Current != 2 || !strings.Contains(err.Error(), "current version is 2") {
		t.Fatalf("stale save: %v", err)
	}
	if fmt.Sprint(pub.numbers()) != "[1 2]" {
		t.Errorf("published %v", pub.numbers())
	}
}

// TestConcurrentSaves: N editors save on the same base at once; exactly one
// wins, the others get a conflict, and the versions are published in order.
func TestConcurrentSaves(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	const n = 10
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			doc := strings.Replace(perIP, `"rps":5`, fmt.Sprintf(`"rps":%d`, i+1), 1)
			_, errs[i] = s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(doc), Author: fmt.Sprint("editor", i)})
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		var ce *ConflictError
		switch {
		case err == nil:
			wins++
		case errors.As(err, &ce) && ce.Current == 2:
		default:
			t.Errorf("unexpected: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d saves won", wins)
	}
	if fmt.Sprint(pub.numbers()) != "[1 2]" {
		t.Errorf("published %v", pub.numbers())
	}
}

func TestRollback(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	v1, _ := s.Current(ctx)
	if _, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "alice"}); err != nil {
		t.Fatal(err)
	}
	v3, err := s.Rollback(ctx, RollbackRequest{To: 1, Base: 2, Author: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if v3.Number != 3 || v3.Parent != 2 || v3.RollbackOf != 1 || v3.Message != "rollback to v1" || v3.Author != "bob" || string(v3.JSON) != string(v1.JSON) {
		t.Errorf("rollback made %+v", v3)
	}
	if fmt.Sprint(pub.numbers()) != "[1 2 3]" || string(pub.got[2].JSON) != string(v1.JSON) {
		t.Errorf("published %v", pub.numbers())
	}
	var ce *ConflictError
	if _, err := s.Rollback(ctx, RollbackRequest{To: 2, Base: 1}); !errors.As(err, &ce) {
		t.Errorf("stale rollback: %v", err)
	}
	if _, err := s.Rollback(ctx, RollbackRequest{To: 9, Base: 3}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "version 9 does not exist") {
		t.Errorf("rollback to a missing version: %v", err)
	}
	var ie *InputError
	for _, r := range []RollbackRequest{{To: 3, Base: 3}, {To: 0, Base: 3}, {To: 1, Base: 0}} {
		if _, err := s.Rollback(ctx, r); !errors.As(err, &ie) {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

func TestStartSkipsACurrentVersionThisFilterRefuses(t *testing.T) {
	// Stored by an older Sluice, which read the Latin-1 byte as U+FFFD: the
	// admin starts, pushes nothing, says why, and the next save pushes.
	ctx := context.Background()
	_, _, st := newService(t)
	latin1 := "{\"rules\":[{\"name\":\"r\",\"limit_keys\":[\"ip:address\"],\"match\":{\"header:x-plan\":\"caf\xe9\"},\"algorithm\":\"token_bucket\",\"algorithm_config\":{\"rps\":5,\"burst\":10}}]}"
	if _, err := st.Append(ctx, 1, store.NewVersion{JSON: []byte(latin1), Author: "old"}); err != nil {
		t.Fatal(err)
	}
	pub := &recorder{}
	s := New(st, pub, nil)
	v, err := s.Start(ctx)
	if err != nil || v.Number != 2 {
		t.Fatalf("Start = %d, %v; want version 2 and no error", v.Number, err)
	}
	if len(pub.numbers()) != 0 {
		t.Errorf("published %v, want nothing", pub.numbers())
	}
	if ps := s.LastPublish(); ps.Version != 2 || ps.Err == nil || !strings.Contains(ps.Err.Error(), "version 2") || !strings.Contains(ps.Err.Error(), "UTF-8") {
		t.Errorf("LastPublish = %+v, want version 2's error naming UTF-8", ps)
	}
	if _, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIP)}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pub.numbers()) != "[3]" || s.LastPublish().Err != nil {
		t.Errorf("after a save: published %v, last %+v", pub.numbers(), s.LastPublish())
	}
}

func TestRollbackRevalidates(t *testing.T) {
	// A version stored by an older, laxer parser is not restored blindly.
	ctx := context.Background()
	s, pub, st := newService(t)
	if _, err := st.Append(ctx, 1, store.NewVersion{JSON: []byte(`{"rules":[],"legacy":true}`), Author: "old"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(perIP)}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Rollback(ctx, RollbackRequest{To: 2, Base: 3})
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) == 0 {
		t.Fatalf("rollback to an invalid version: %v", err)
	}
	if cur, _ := s.Current(ctx); cur.Number != 3 {
		t.Errorf("current = %d", cur.Number)
	}
	if fmt.Sprint(pub.numbers()) != "[1 3]" {
		t.Errorf("published %v", pub.numbers())
	}
}

func TestListPaging(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	for base := int64(1); base < 7; base++ {
		if _, err := s.Save(ctx, SaveRequest{Base: base, JSON: []byte(perIP), Message: fmt.Sprint("m", base+1)}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []int64
	before := int64(0)
	for pages := 0; ; pages++ {
		p, err := s.List(ctx, before, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range p.Versions {
			seen = append(seen, v.Number)
		}
		if p.NextBefore == 0 {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		before = p.NextBefore
	}
	if fmt.Sprint(seen) != "[7 6 5 4 3 2 1]" {
		t.Errorf("pages gave %v", seen)
	}
	if p, _ := s.List(ctx, 0, 0); len(p.Versions) != 7 || p.NextBefore != 0 {
		t.Errorf("default page: %d versions, next %d", len(p.Versions), p.NextBefore)
	}
	var ie *InputError
	for _, c := range [][2]int64{{-1, 3}, {0, -1}, {0, MaxPage + 1}} {
		if _, err := s.List(ctx, c[0], int(c[1])); !errors.As(err, &ie) {
			t.Errorf("List(%d, %d) = %v", c[0], c[1], err)
		}
	}
}

func TestServiceDiff(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newService(t)
	s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP)})
	s.Save(ctx, SaveRequest{Base: 2, JSON: []byte(strings.Replace(perIP, `"burst":10`, `"burst":30`, 1))})
	d, err := s.Diff(ctx, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := "--- v2\n+++ v3\n@@ -18,7 +18,7 @@\n" +
		"           \"algorithm\": \"token_bucket\",\n" +
		"           \"algorithm_config\": {\n" +
		"             \"tokens_per_second\": 5,\n" +
		"-            \"burst\": 10,\n" +
		"+            \"burst\": 30,\n" +
		"             \"cost_source\": \"fixed\",\n" +
		"             \"fixed_cost\": 1,\n" +
		"             \"default_cost\": 1\n"
	if got := d.Unified(); got != want {
		t.Errorf("diff:\n%s\nwant:\n%s", got, want)
	}
	d0, err := s.Diff(ctx, 0, 1)
	if err != nil || len(d0.Hunks) != 1 || d0.Hunks[0].OldCount != 0 || d0.Hunks[0].NewCount != strings.Count(d0.To.Pretty(), "\n") {
		t.Errorf("diff from nothing: %+v %v", d0.Hunks, err)
	}
	if d, _ := s.Diff(ctx, 3, 3); len(d.Hunks) != 0 {
		t.Errorf("diff of a version with itself: %v", d.Hunks)
	}
	if _, err := s.Diff(ctx, 1, 99); !errors.Is(err, ErrNotFound) {
		t.Errorf("diff to missing: %v", err)
	}
	if _, err := s.Diff(ctx, -1, 2); err == nil {
		t.Error("negative from accepted")
	}
}

func TestStartUsesInitialConfigOnlyOnAnEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	bad := New(st, nil, nil)
	bad.SetInitialConfig([]byte(`{"rules":[{"name":"x","algorithm":"nope"}]}`))
	if _, err := bad.Start(ctx); err == nil || !strings.Contains(err.Error(), "initial policy") || !strings.Contains(err.Error(), "rules[0]") {
		t.Fatalf("invalid initial policy: got %v, want an error naming it and the field", err)
	}

	s := New(st, nil, nil)
	s.SetInitialConfig([]byte(perIP))
	v, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(v.JSON)
	if err != nil || v.Number != 1 || cfg.RuleByName("per-ip") == nil {
		t.Fatalf("v1 = %d %s (%v), want the initial policy", v.Number, v.JSON, err)
	}

	// A database with versions ignores it.
	again := New(st, nil, nil)
	again.SetInitialConfig([]byte(DefaultConfig))
	v, err = again.Start(ctx)
	if err != nil || v.Number != 1 || !strings.Contains(string(v.JSON), "per-ip") {
		t.Fatalf("restart with versions: v%d %s %v", v.Number, v.JSON, err)
	}
}

// TestSaveWindowedPolicy: a windowed rule is accepted, normalized and
// published like a token bucket.
func TestSaveWindowedPolicy(t *testing.T) {
	ctx := context.Background()
	s, pub, _ := newService(t)
	in := `{"rules":[{"name":"daily","limit_keys":["header:x-api-key"],"algorithm":"rolling_window",
	  "algorithm_config":{"limit":10000,"window_seconds":86400,"period_seconds":3600,"max_per_period":1000}}]}`
	v, err := s.Save(ctx, SaveRequest{Base: 1, JSON: []byte(in), Message: "nominet rolling window"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := policy.Parse(v.JSON)
	if err != nil || c.RuleByName("daily").Window.Periods() != 24 {
		t.Fatalf("stored configuration: %v %s", err, v.JSON)
	}
	if !strings.Contains(string(v.JSON), `"period_seconds":3600`) || fmt.Sprint(pub.numbers()) != "[1 2]" {
		t.Errorf("stored %s, published %v", v.JSON, pub.numbers())
	}
}

// TestStartLogSaysWhichPolicyItStored: the first start logs "stored the
// initial policy" for -initial-policy and "created the default policy"
// only when it stored the built-in default.
func TestStartLogSaysWhichPolicyItStored(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, initial, want, not string
	}{
		{"initial policy given", perIP, "stored the initial policy", "default"},
		{"no initial policy", "", "created the default policy", "initial policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.Open(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var out strings.Builder
			s := New(st, nil, slog.New(slog.NewTextHandler(&out, nil)))
			if tc.initial != "" {
				s.SetInitialConfig([]byte(tc.initial))
			}
			if _, err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if log := out.String(); !strings.Contains(log, tc.want) || strings.Contains(log, tc.not) {
				t.Fatalf("log %q, want %q and no %q", log, tc.want, tc.not)
			}
		})
	}
}

// Two admin processes on one database: a save on one is published by the
// other at its next Sync, once.
func TestSyncPublishesVersionsSavedByAnotherAdmin(t *testing.T) {
	ctx := context.Background()
	a, pubA, st := newService(t)
	pubB := &recorder{}
	b := New(st, pubB, nil)
	if _, err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Sync(ctx); ok || err != nil {
		t.Errorf("Sync with nothing new: %v, %v", ok, err)
	}
	v, err := a.Save(ctx, SaveRequest{Base: 1, JSON: []byte(perIP), Author: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Sync(ctx); !ok || err != nil {
		t.Fatalf("Sync after the other's save: %v, %v", ok, err)
	}
	if ok, _ := b.Sync(ctx); ok {
		t.Error("the same version published twice")
	}
	if got := pubB.numbers(); !reflect.DeepEqual(got, []int64{1, v.Number}) {
		t.Errorf("b published %v, want [1 %d]", got, v.Number)
	}
	if got := pubA.numbers(); !reflect.DeepEqual(got, []int64{1, v.Number}) {
		t.Errorf("a published %v", got)
	}
	if b.LastPublish().Version != v.Number {
		t.Errorf("b's last publish: %+v", b.LastPublish())
	}
}
