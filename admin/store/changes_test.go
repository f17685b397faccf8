package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

// checkChanges runs a change's life on s: proposed, listed, decided once
// (of two reviewers deciding at once, one wins), found by ID.
func checkChanges(t *testing.T, s *Store) {
	ctx := context.Background()
	t1 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := "tests: []"
	a, err := s.ProposeChange(ctx, NewChange{Base: 3, JSON: []byte(`{"rules":[]}`), Tests: &tests, Author: "ann", Message: "m", Created: t1})
	if err != nil || a.ID == 0 || a.State != ChangeOpen {
		t.Fatalf("propose: %+v %v", a, err)
	}
	b, err := s.ProposeChange(ctx, NewChange{Base: 3, JSON: []byte(`{"rules":[1]}`), Author: "bob", Created: t1})
	if err != nil || b.ID <= a.ID {
		t.Fatalf("second: %+v %v", b, err)
	}
	open, err := s.Changes(ctx, ChangeOpen, 10)
	if err != nil || len(open) != 2 || open[0].ID != b.ID || open[1].Tests == nil || *open[1].Tests != tests || open[0].Tests != nil {
		t.Fatalf("open: %+v %v", open, err)
	}
	var wg sync.WaitGroup
	wins := make(chan string, 2)
	for _, who := range []string{"cat", "dan"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.CloseChange(ctx, a.ID, ChangeApproved, who, "", 4, t1.Add(time.Minute)); err == nil {
				wins <- who
			} else if !errors.Is(err, ErrChangeClosed) {
				t.Errorf("%s: %v", who, err)
			}
		}()
	}
	wg.Wait()
	close(wins)
	if len(wins) != 1 {
		t.Fatalf("%d reviewers closed the change", len(wins))
	}
	winner := <-wins
	got, err := s.Change(ctx, a.ID)
	if err != nil || got.State != ChangeApproved || got.Version != 4 || got.DecidedBy != winner || !got.Decided.Equal(t1.Add(time.Minute)) || string(got.JSON) != `{"rules":[]}` {
		t.Fatalf("approved: %+v %v", got, err)
	}
	if err := s.CloseChange(ctx, b.ID, ChangeRejected, "cat", "too wide", 0, t1); err != nil {
		t.Fatal(err)
	}
	if open, _ := s.Changes(ctx, ChangeOpen, 10); len(open) != 0 {
		t.Fatalf("still open: %+v", open)
	}
	if all, _ := s.Changes(ctx, "", 10); len(all) != 2 || all[0].Reason != "too wide" {
		t.Fatalf("all: %+v", all)
	}
	if _, err := s.Change(ctx, 999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := s.CloseChange(ctx, 999, ChangeRejected, "cat", "", 0, t1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("closing a missing change: %v", err)
	}
}

func TestChangesAreProposedAndDecidedOnce(t *testing.T) {
	s, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	checkChanges(t, s)
}

func TestPostgresChangesAreProposedAndDecidedOnce(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	checkChanges(t, openPostgres(t, pg.URL))
}
