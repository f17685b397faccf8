package xds

import (
	"github.com/sluice-rl/sluice/admin/httpapi"
	"github.com/sluice-rl/sluice/admin/policies"
)

// The contract types (coord contracts section C) are declared where they
// are used; the xDS server implements both interfaces.
type (
	// Version is a policy version that became current.
	Version = policies.Version
	// NodeStatus is what the admin knows about one xDS client.
	NodeStatus = httpapi.NodeStatus
)

var (
	_ policies.Publisher = (*Server)(nil)
	_ httpapi.NodeLister = (*Server)(nil)
)
