package xds

import (
	"time"

	"github.com/sluice-rl/sluice/admin/policies"
)

// The types the xDS server shares with the rest of the admin are declared
// where they are used (policies) or here (NodeStatus, which the HTTP API
// converts to its own identical type): xds imports no HTTP package.
type (
	// Version is a policy version that became current.
	Version = policies.Version
	// Reset is one entry of the pushed configuration's "resets": the
	// Envoys forget the state of Key under Rule (with All, of every
	// identity of Rule), once per process (by ID). Resets belong to no version: the server adds the current ones
	// to every configuration it pushes, a version's or a trial's
	// (resets.go), the pushed configuration being the only channel to
	// every Envoy's shared data.
	Reset = policies.PushedReset
)

// NodeStatus is what the admin knows about one xDS client.
type NodeStatus struct {
	ID, Cluster   string
	Connected     bool
	LastSeen      time.Time
	AckedVersion  string // the policy version number (as string) the node has ACKed, "" if none
	NackedVersion string // last NACK, if any
	NackError     string // its error_detail.message
}

var (
	_ policies.Publisher      = (*Server)(nil)
	_ policies.ResetPublisher = (*Server)(nil)
)
