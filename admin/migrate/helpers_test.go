package migrate

import (
	"strings"
	"testing"
)

// notesContain checks that the notes say each of want.
func notesContain(t *testing.T, notes []string, want ...string) {
	t.Helper()
	all := strings.Join(notes, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("the notes lack %q:\n%s", w, all)
		}
	}
}
