package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

func resetIDs(rs []Reset) string {
	out := ""
	for _, r := range rs {
		out += r.ID + " "
	}
	return out
}

// checkResets stores resets on s and reads them back: the list newest
// first, the window relative to the newest reset (not to the clock), a
// duplicate ID refused, and the mark moving with every new reset.
func checkResets(t *testing.T, s *Store) {
	ctx := context.Background()
	if w, err := s.ResetWindow(ctx, 15*time.Minute, 256); err != nil || len(w) != 0 {
		t.Fatalf("window of no resets: %v, %v", w, err)
	}
	mark0, err := s.ResetsMark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for i, m := range []int{0, 40, 50, 54, 55} { // minutes after t0
		r := Reset{ID: fmt.Sprintf("r%d", i), Created: t0.Add(time.Duration(m) * time.Minute), Author: "ops", Rule: "per-key", Key: fmt.Sprintf("k%d", i)}
		if err := s.AddReset(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddReset(ctx, Reset{ID: "r1", Created: t0, Author: "x", Rule: "y", Key: "z"}); err == nil {
		t.Error("a second reset with the ID r1 was stored")
	}
	all, err := s.Resets(ctx, 10)
	if err != nil || resetIDs(all) != "r4 r3 r2 r1 r0 " {
		t.Fatalf("Resets: %s, %v", resetIDs(all), err)
	}
	if r := all[0]; r.Author != "ops" || r.Rule != "per-key" || r.Key != "k4" || !r.Created.Equal(t0.Add(55*time.Minute)) {
		t.Errorf("newest reset read back as %+v", r)
	}
	if few, _ := s.Resets(ctx, 2); resetIDs(few) != "r4 r3 " {
		t.Errorf("Resets limited to 2: %s", resetIDs(few))
	}
	// Within 15 minutes of the newest (55): 40 (exactly 15 before), 50, 54, 55.
	if w, err := s.ResetWindow(ctx, 15*time.Minute, 256); err != nil || resetIDs(w) != "r1 r2 r3 r4 " {
		t.Errorf("window: %s, %v; want r1 to r4, oldest first", resetIDs(w), err)
	}
	if w, _ := s.ResetWindow(ctx, 15*time.Minute, 2); resetIDs(w) != "r3 r4 " {
		t.Errorf("window of at most 2: %s; want the newest two", resetIDs(w))
	}
	mark1, _ := s.ResetsMark(ctx)
	// A reset written by a replica whose clock is behind is not the newest,
	// but the mark still moves.
	if err := s.AddReset(ctx, Reset{ID: "late", Created: t0.Add(45 * time.Minute), Author: "ops", Rule: "r", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	mark2, _ := s.ResetsMark(ctx)
	if mark0 == mark1 || mark1 == mark2 {
		t.Errorf("marks %q, %q, %q: each new reset must change the mark", mark0, mark1, mark2)
	}
}

func TestResetsAreStoredAndWindowedByTheNewest(t *testing.T) {
	s, _ := openTemp(t)
	checkResets(t, s)
}

func TestPostgresResetsAreStoredAndWindowedByTheNewest(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	checkResets(t, openPostgres(t, pg.URL))
}
