package envoyhost_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
)

// recordTB records what Require does to a test: Skipf and Fatal end the
// goroutine, as the real ones do.
type recordTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordTB) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

func require(t *testing.T) *recordTB {
	r := &recordTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		envoyhost.Require(r, envoyhost.FastJIT)
	}()
	<-done
	return r
}

func TestMissingHostProgramFailsWithInstructionsUnlessSkippedOutsideCI(t *testing.T) {
	t.Setenv("SLUICE_ENVOYHOST_DIR", t.TempDir())

	t.Setenv("SLUICE_SKIP_ENVOYHOST", "")
	t.Setenv("CI", "")
	r := require(t)
	if r.failed == "" || !strings.Contains(r.failed, "make envoyhost") || !strings.Contains(r.failed, "sluice-envoyhost-jit") {
		t.Fatalf("missing program: failed=%q skipped=%q, want a failure saying to run make envoyhost", r.failed, r.skipped)
	}

	t.Setenv("SLUICE_SKIP_ENVOYHOST", "1")
	if r := require(t); r.skipped == "" || r.failed != "" {
		t.Fatalf("SLUICE_SKIP_ENVOYHOST=1 outside CI: failed=%q skipped=%q, want a skip", r.failed, r.skipped)
	}

	t.Setenv("CI", "true")
	if r := require(t); r.failed == "" || r.skipped != "" {
		t.Fatalf("SLUICE_SKIP_ENVOYHOST=1 under CI: failed=%q skipped=%q, want a failure", r.failed, r.skipped)
	}

	t.Setenv("SLUICE_THIRD_PARTY", "")
	if _, err := envoyhost.Binary(envoyhost.FastInterp); err == nil || !strings.Contains(err.Error(), "SLUICE_THIRD_PARTY") {
		t.Fatalf("without SLUICE_THIRD_PARTY the message does not name it: %v", err)
	}
}
