package httpapi

import "time"

// NodeLister reports the Envoy nodes connected over xDS (admin/xds
// implements it).
type NodeLister interface {
	Nodes() []NodeStatus
}

// ServingVersion is a NodeLister that also says what it pushes now: the
// resource version nodes that have the latest push ACKed.
type ServingVersion interface {
	Serving() string
}

// NodeStatus is what the admin knows about one xDS client.
type NodeStatus struct {
	ID, Cluster   string
	Connected     bool
	LastSeen      time.Time
	AckedVersion  string // the policy version number (as string) the node has ACKed, "" if none
	NackedVersion string // last NACK, if any
	NackError     string // its error_detail.message
}
