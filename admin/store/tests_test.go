package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

// checkPolicyTests runs the saved tests' life on s: none, the first
// revision, a change on it, a stale change refused, concurrent changes
// on one base of which exactly one wins.
func checkPolicyTests(t *testing.T, s *Store) {
	ctx := context.Background()
	if got, err := s.PolicyTests(ctx); err != nil || got.Revision != 0 || got.Body != "" {
		t.Fatalf("before any: %+v, %v", got, err)
	}
	t1 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	first, err := s.PutPolicyTests(ctx, 0, "tests: [a]", "alice", t1)
	if err != nil || first.Revision != 1 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if _, err := s.PutPolicyTests(ctx, 1, "tests: [b]", "bob", t1.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := s.PolicyTests(ctx)
	if err != nil || got.Revision != 2 || got.Body != "tests: [b]" || got.Author != "bob" || !got.Updated.Equal(t1.Add(time.Minute)) {
		t.Fatalf("after two: %+v, %v", got, err)
	}
	for _, base := range []int64{0, 1, 5} {
		var ce *TestsConflictError
		if _, err := s.PutPolicyTests(ctx, base, "tests: [stale]", "eve", t1); !errors.As(err, &ce) || ce.Base != base || ce.Current != 2 {
			t.Fatalf("base %d: %v, want a conflict naming revision 2", base, err)
		}
	}
	var wg sync.WaitGroup
	wins := make(chan int64, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := s.PutPolicyTests(ctx, 2, "tests: [race]", "racer", t1); err == nil {
				wins <- v.Revision
			}
		}()
	}
	wg.Wait()
	close(wins)
	if n := len(wins); n != 1 {
		t.Fatalf("%d of 8 concurrent changes on one base won; want exactly 1", n)
	}
	if got, _ := s.PolicyTests(ctx); got.Revision != 3 || got.Body != "tests: [race]" {
		t.Fatalf("after the race: %+v", got)
	}
}

func TestPolicyTestsKeepOneRevisionedFile(t *testing.T) {
	s, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	checkPolicyTests(t, s)
}

func TestPostgresPolicyTestsKeepOneRevisionedFile(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	checkPolicyTests(t, openPostgres(t, pg.URL))
}
