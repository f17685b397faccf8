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

// checkResetsOfEveryIdentity stores a reset of every identity of a rule
// beside one of a single identity, and reads both back as they were: the
// window and the list tell them apart. A reset naming both or neither is
// refused.
func checkResetsOfEveryIdentity(t *testing.T, s *Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	if err := s.AddReset(ctx, Reset{ID: "one", Created: t0, Author: "ops", Rule: "per-key", Key: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddReset(ctx, Reset{ID: "every", Created: t0.Add(time.Minute), Author: "ops", Rule: "per-key", All: true}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Reset{
		{ID: "both", Created: t0, Author: "ops", Rule: "per-key", Key: "alice", All: true},
		{ID: "neither", Created: t0, Author: "ops", Rule: "per-key"},
	} {
		if err := s.AddReset(ctx, bad); err == nil {
			t.Errorf("the reset %+v was stored", bad)
		}
	}
	list, err := s.Resets(ctx, 10)
	if err != nil || resetIDs(list) != "every one " {
		t.Fatalf("Resets: %s, %v", resetIDs(list), err)
	}
	if r := list[0]; !r.All || r.Key != "" || r.Rule != "per-key" {
		t.Errorf("the reset of every identity read back as %+v", r)
	}
	if r := list[1]; r.All || r.Key != "alice" {
		t.Errorf("the reset of one identity read back as %+v", r)
	}
	w, err := s.ResetWindow(ctx, 15*time.Minute, 256)
	if err != nil || resetIDs(w) != "one every " || w[0].All || !w[1].All {
		t.Errorf("window: %+v, %v; want the reset of one identity, then the one of every identity", w, err)
	}
}

func TestAResetOfEveryIdentityIsStoredApartFromOneIdentitys(t *testing.T) {
	s, _ := openTemp(t)
	checkResetsOfEveryIdentity(t, s)
}

func TestPostgresAResetOfEveryIdentityIsStoredApartFromOneIdentitys(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	checkResetsOfEveryIdentity(t, openPostgres(t, pg.URL))
}
