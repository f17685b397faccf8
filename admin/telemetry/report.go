package telemetry

import telfmt "github.com/sluice-rl/sluice/shared/telemetry"

// The report format and its decoder live in shared/telemetry, next to the
// field names the plugin's encoder writes; these names keep the admin's
// callers working.

// FormatVersion is the report format ("v") this admin understands.
const FormatVersion = telfmt.FormatVersion

// Limits of a report (shared/telemetry).
const (
	MaxBodyBytes          = telfmt.MaxBodyBytes
	MaxNodeLen            = telfmt.MaxNodeLen
	MaxVMLen              = telfmt.MaxVMLen
	MaxIdentityLen        = telfmt.MaxIdentityLen
	MaxReportRules        = telfmt.MaxReportRules
	MaxReportBuckets      = telfmt.MaxReportBuckets
	MaxIntervalMS         = telfmt.MaxIntervalMS
	MaxErrors             = telfmt.MaxErrors
	MaxOverflowIdentities = telfmt.MaxOverflowIdentities
	MaxFleetSize          = telfmt.MaxFleetSize
	DefaultIntervalMS     = telfmt.DefaultIntervalMS
)

type (
	// Report is one validated telemetry report.
	Report = telfmt.Report
	// RuleCounters are one rule's counters in a report.
	RuleCounters = telfmt.RuleCounters
	// Bucket is one bucket's state in a report.
	Bucket = telfmt.Bucket
	// Fleet is a report's optional fleet-mode object.
	Fleet = telfmt.Fleet
	// FleetRule is one global rule of a report's fleet object.
	FleetRule = telfmt.FleetRule
	// FieldError is one problem of a report, at a JSON path.
	FieldError = telfmt.FieldError
	// Errors is every problem found in a report.
	Errors = telfmt.Errors
)

// Decode parses and validates a report (telfmt.Decode).
func Decode(data []byte) (*Report, error) { return telfmt.Decode(data) }

// FormatHash formats a configuration hash as the reports carry it.
func FormatHash(h uint64) string { return telfmt.FormatHash(h) }
