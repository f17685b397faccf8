package migrate

// The converter of Kong's configurations (kong.go): the model.

import (
	"fmt"
)

// kongConv holds one conversion: the entities read, the plugins to
// convert, the names used and the notes.
type kongConv struct {
	*converter
	opts        KongOptions
	legacyPaths bool // a 1.1 or 2.1 file: paths without ~ may be regular expressions
	scoped      bool // Kubernetes objects with Ingresses: plugins are where annotations attach them
	services    []*kongSvc
	svcByRef    map[string]*kongSvc
	rtByRef     map[string]*kongRt
	consByRef   map[string]*kongCons
	limits      []*kongRL
	scopes      map[string]string // a scope's identity: the plugin holding it
	keyAuths    []kongKeyAuth
	skipped     []string // why plugins were left out, for an error when nothing converts
	items       int
	consumerKey string
	routes      []*kongRt // the top-level routes, in order
	consumers   []*kongCons
	out         []kongPolicy
	// The top-level settings, chosen among the plugins'.
	status   int
	body     string // error message of the most plugins
	showHdrs bool
}

type kongSvc struct {
	name   string
	routes []*kongRt
	kube   string // the Kubernetes Service ("ns/name") the controller made it of
}

type kongRt struct {
	name, path string
	svc        *kongSvc
	conds      kongConds
	prio       uint64
	err        error  // the route cannot be written as a match
	lost       string // criteria not converted (snis, ...)
}

type kongCons struct {
	name string
	keys []string
}

// kongKeyAuth is a key-auth plugin: where consumers' keys are read.
type kongKeyAuth struct {
	line      int
	path      string
	keyNames  []string
	inQuery   bool
	anonymous string
	svc       *kongSvc // where it runs: nil and nil for every route
	rt        *kongRt
}

// kongRL is one rate-limiting plugin to convert.
type kongRL struct {
	path    string // where it is: services[0].plugins[1]
	label   string // its rules' names start with it
	lim     kongLimit
	svc     *kongSvc
	rt      *kongRt
	cons    *kongCons
	level   int
	targets []kongTarget
	note    string // Kubernetes: what the user must add
	// byAddress: limit_by consumer where Kong never knows the consumer,
	// so it counts per client address.
	byAddress bool
}

// kongTarget is one set of conditions a plugin's rules match.
type kongTarget struct {
	conds     kongConds
	prio      uint64
	label     string // a service of a global limit_by service plugin
	byAddress bool   // after those, the requests of no service
}

// Bounds on the work of one conversion.
const (
	kongMaxItems  = 200000 // routes, paths, hosts, keys, plugins
	kongMaxRoutes = 10000  // routes of one service
)

func (k *kongConv) count(path string, n int) error {
	if k.items += n; k.items > kongMaxItems {
		return fmt.Errorf("%s: more than %d routes, paths, hosts, keys and plugins (YAML aliases expanded); convert part of the file at a time", path, kongMaxItems)
	}
	return nil
}

// kongLevel is Kong's precedence of a plugin's scope, most specific first
// (kong/runloop/plugins_iterator.lua, lookup_cfg): consumer, route and
// service; consumer and route; consumer and service; route and service;
// consumer; route; service; global.
func kongLevel(cons, rt, svc bool) int {
	switch {
	case cons && rt && svc:
		return 1
	case cons && rt:
		return 2
	case cons && svc:
		return 3
	case rt && svc:
		return 4
	case cons:
		return 5
	case rt:
		return 6
	case svc:
		return 7
	}
	return 8
}
