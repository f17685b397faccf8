// Package telemetry is the plugin's telemetry report format
// (docs/telemetry.md), shared by the plugin, which encodes reports, and the
// admin, which decodes them: the field names (fields.go), the limits, the
// Report types and the strict decoder (Decode). Pure: no I/O, no clock.
package telemetry
