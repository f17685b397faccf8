package telemetry

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/store"
)

func TestTokens(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// First start: generated, stored hashed, printed once.
	tk, gen, err := SetupTokens(ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(gen, TokenPrefix) || len(gen) != len(TokenPrefix)+43 || !tk.Check(gen) || tk.Check(gen+"x") || tk.Check("") {
		t.Fatalf("generated %q", gen)
	}
	info := tk.Info()
	if info.Hint != gen[:len(TokenPrefix)+4]+"…" || info.FromFlag || info.Created.IsZero() {
		t.Errorf("info %+v", info)
	}
	c, err := st.Credential(ctx, store.TelemetryTokenName)
	if err != nil || strings.Contains(string(c.Hash), gen) || c.Hint != info.Hint {
		t.Fatalf("stored %+v %v", c, err)
	}

	// Second start: the stored one, nothing printed.
	tk2, gen2, err := SetupTokens(ctx, st, "")
	if err != nil || gen2 != "" || !tk2.Check(gen) {
		t.Fatalf("second start: %q %v", gen2, err)
	}

	// Rotation with grace: the old token works until the grace ends.
	now := time.Now()
	tk2.SetClock(func() time.Time { return now })
	fresh, err := tk2.Rotate(ctx, time.Minute)
	if err != nil || fresh == gen || !tk2.Check(fresh) || !tk2.Check(gen) {
		t.Fatalf("rotate: %v", err)
	}
	if tk2.Info().PreviousValidUntil.IsZero() {
		t.Error("grace not shown")
	}
	now = now.Add(61 * time.Second)
	if tk2.Check(gen) || !tk2.Check(fresh) {
		t.Error("the old token outlived its grace")
	}
	// Without grace, at once.
	newer, _ := tk2.Rotate(ctx, 0)
	if tk2.Check(fresh) || !tk2.Check(newer) {
		t.Error("rotation without grace")
	}
	if _, err := tk2.Rotate(ctx, 48*time.Hour); err == nil {
		t.Error("grace over the maximum accepted")
	}
	// The rotation is stored: a restart uses the new token.
	tk3, _, _ := SetupTokens(ctx, st, "")
	if !tk3.Check(newer) || tk3.Check(gen) {
		t.Error("the rotated token was not stored")
	}
	// Sessions are untouched by a telemetry rotation (the admin token's
	// rotation ends them; this one must not).

	// A token from the flag: checked, not stored, not rotatable.
	tf, g, err := SetupTokens(ctx, st, "flag-token-0123456789")
	if err != nil || g != "" || !tf.Check("flag-token-0123456789") || tf.Check(newer) || !tf.Info().FromFlag {
		t.Fatalf("flag token: %v", err)
	}
	if _, err := tf.Rotate(ctx, 0); err != ErrFixedToken {
		t.Errorf("rotating a flag token: %v", err)
	}
	for _, bad := range []string{"short", "has a space in it!!!", "tab\tin-the-token-0000"} {
		if _, _, err := SetupTokens(ctx, st, bad); err == nil {
			t.Errorf("weak token %q accepted", bad)
		}
	}
}
