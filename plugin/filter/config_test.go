package filter

import (
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// TestACompiledConfigurationNeverRejectsWithGRPCStatusOK: a configuration
// not made by the parser (no rules, zero values) still rejects gRPC calls
// with a failing status, never OK (0), and with an HTTP 4xx/5xx.
func TestACompiledConfigurationNeverRejectsWithGRPCStatusOK(t *testing.T) {
	cc := compile(&policy.Config{}, nil)
	if cc.rejectGRPC != policy.DefaultRejectGRPCStatus || cc.rejectStatus != policy.DefaultRejectStatus {
		t.Errorf("zero configuration: gRPC status %d, HTTP status %d", cc.rejectGRPC, cc.rejectStatus)
	}
	if cc := compile(&policy.Config{RejectGRPCStatus: 14, RejectStatus: 503}, nil); cc.rejectGRPC != 14 || cc.rejectStatus != 503 {
		t.Errorf("configured: gRPC status %d, HTTP status %d", cc.rejectGRPC, cc.rejectStatus)
	}
}
