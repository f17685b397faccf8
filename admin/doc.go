// Package admin will hold the Sluice admin server: policy storage with
// history, validation through shared/policy, live push to Envoy over ECDS,
// telemetry ingestion and the HTTP handlers behind the dashboard.
//
// It is built in a later issue; the directory exists so the layout is fixed
// from the start (plugin → shared ← admin → web).
package admin
