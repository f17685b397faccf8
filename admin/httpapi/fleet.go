package httpapi

import (
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/web"
)

// Fleet is fleet mode's rate limit service (admin/fleet.Server), for the
// dashboard's "Global rules" section.
type Fleet interface {
	Overview() fleet.Overview
}

// fleetSection formats the overview for the dashboard; nil when fleet
// mode is off.
func (s *server) fleetSection(now time.Time) *web.FleetSection {
	if s.Fleet == nil {
		return nil
	}
	ov := s.Fleet.Overview()
	h := ov.Health
	f := &web.FleetSection{Backend: ov.Backend, Up: h.Up, Nodes: ov.Nodes, Checked: "never", Errors: count(h.Errors)}
	switch {
	case h.Checked.IsZero():
		f.Status = "not checked yet"
	case h.Up:
		f.Status = "up"
		f.Latency = strconv.FormatFloat(float64(h.Latency.Microseconds())/1000, 'f', 1, 64) + " ms"
	default:
		f.Status = "down"
	}
	if !h.Checked.IsZero() {
		f.Checked = ago(now.Sub(h.Checked))
	}
	if h.LastError != "" {
		f.LastError, f.ErrorAt = printableText(h.LastError), ago(now.Sub(h.ErrorAt))
	}
	for _, r := range ov.Rules {
		limit := "not in the current policy (limit override)"
		if r.Known {
			limit = num(r.Limit.Rate) + "/s, burst " + num(r.Limit.Burst)
		}
		if len(r.Usage) == 0 {
			f.Rules = append(f.Rules, web.FleetRule{Name: r.Name, Limit: limit, Known: r.Known,
				Granted: rate(0), Denied: rate(0), Returned: rate(0)})
			continue
		}
		for _, u := range r.Usage {
			fr := web.FleetRule{Name: r.Name, Domain: printableText(u.Domain), Limit: limit, Known: r.Known,
				Granted: rate(u.GrantedPerSecond), Denied: rate(u.DeniedPerSecond), Returned: rate(u.ReturnedPerSecond)}
			for _, n := range u.Nodes {
				id := printableText(n.Node)
				if id == "" {
					id = "(no id)"
				}
				fr.Nodes = append(fr.Nodes, web.FleetNode{ID: id, LastLease: count(n.LastLease),
					Granted: count(n.Granted), Returned: count(n.Returned), Denied: count(n.Denied), Seen: ago(now.Sub(n.LastSeen))})
			}
			f.Rules = append(f.Rules, fr)
		}
	}
	return f
}
