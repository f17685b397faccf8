package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dustin/go-humanize"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/web"
)

// Dashboard sizes: what one render shows, whatever the state holds.
const (
	dashTopKeys     = 15
	dashSearchLimit = 50
	dashPoints      = 150
)

// Server-sent events: how often the stream looks for changes, how often it
// sends a fragment without a change (the charts move with time), how long
// one stream lasts (EventSource reconnects, which checks the session
// again), and how often the session is checked meanwhile.
var (
	eventsTick      = time.Second
	eventsIdle      = 5 * time.Second
	eventsMaxStream = 5 * time.Minute
	eventsAuthEvery = 30 * time.Second
)

func (s *server) registerDashboard(mux *http.ServeMux) {
	mux.Handle("GET /dashboard", s.page(s.dashboardPage))
	mux.Handle("GET /dashboard/events", s.page(s.dashboardEvents))
}

// dashboardPage is GET /dashboard?window=&q=; with fragment=1 it returns
// only the live part (what dashboard.js swaps in).
func (s *server) dashboardPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	p, err := s.dashboardView(r, sess)
	if err != nil {
		return err
	}
	if r.URL.Query().Get("fragment") != "" {
		s.render(w, r, http.StatusOK, web.DashboardFragment(p.Live))
		return nil
	}
	p.Reset = s.resetPanel(r.Context(), sess)
	s.render(w, r, http.StatusOK, web.Dashboard(p))
	return nil
}

func (s *server) dashboardView(r *http.Request, sess auth.Session) (web.DashboardPage, error) {
	window, label, err := parseWindow(r.URL.Query().Get("window"))
	if err != nil {
		return web.DashboardPage{}, err
	}
	q := telemetry.CleanQuery(r.URL.Query().Get("q"))
	p := web.DashboardPage{Nav: nav(sess, "dashboard"), Query: q}
	for _, w := range windows {
		p.Windows = append(p.Windows, web.WindowLink{Label: w.label, URL: dashURL("/dashboard", w.label, q, false), Active: w.label == label})
	}
	p.Live = web.DashboardLive{
		Enabled: s.Telemetry != nil, Window: label,
		FragmentURL: dashURL("/dashboard", label, q, true), EventsURL: dashURL("/dashboard/events", label, q, true),
	}
	if s.Telemetry == nil {
		return p, nil
	}
	now := s.now()
	ov := s.Telemetry.State.Overview(now, telemetry.OverviewOptions{Window: window, Points: dashPoints, TopN: dashTopKeys})
	l := &p.Live
	l.Updated = now.UTC().Format("15:04:05 UTC")
	l.UpdatedISO = now.UTC().Format(time.RFC3339)
	l.NoReports = len(ov.Nodes) == 0
	l.Current = s.Policies.LastPublish().Version
	if l.Current == 0 {
		if cur, err := s.Policies.Current(r.Context()); err == nil {
			l.Current = cur.Number
		}
	}
	all := ov.Totals.Sum()
	for d := range telemetry.NumDecisions {
		st := web.Stat{Kind: d.String(), Label: decisionLabel(d), Count: count(ov.Totals[d]), Rate: rate(ov.Rates[d])}
		if d != telemetry.Allowed && all > 0 {
			st.Share = share(ov.Totals[d], all)
		}
		l.Totals = append(l.Totals, st)
	}
	timed := s.versions.get(r.Context(), s.Policies, l.Current).timed
	for _, rv := range ov.Rules {
		card := web.RuleCard{Name: rv.Name, Nodes: rv.Nodes}
		if tr := timed[rv.Name]; tr != nil {
			card.Time, card.TimeNow = ruleTimeText(tr, now)
		}
		series := make([]web.ChartSeries, telemetry.NumDecisions)
		for d := range telemetry.NumDecisions {
			card.Stats = append(card.Stats, web.Stat{Kind: d.String(), Label: decisionLabel(d), Count: count(rv.Window[d]), Rate: rate(rv.Rates[d])})
			vals := make([]float64, len(rv.Points))
			for i, c := range rv.Points {
				vals[i] = float64(c[d]) / float64(ov.Step)
				if ov.Start+int64((i+1)*ov.Step) <= rv.First { // before the admin heard of the rule
					vals[i] = math.NaN()
				}
			}
			series[d] = web.ChartSeries{Kind: d.String(), Label: decisionLabel(d), Values: vals}
		}
		card.Chart = web.NewChart(series, ov.Window)
		card.Overflow = ruleOverflow(rv.Overflow)
		card.Actions = ruleActions(rv.Actions)
		card.ResponseCosts, card.CostsUnreported = responseCosts(rv.ResponseCosts)
		card.KeyMissing, card.NeverKeyed = keyMissing(rv.Actions.KeyMissing, rv.Window)
		l.Rules = append(l.Rules, card)
	}
	l.Fleet = s.fleetSection(r.Context(), now, l.Current, ov.Fleet)
	for _, k := range ov.TopKeys {
		l.Keys = append(l.Keys, keyRow(k, now))
	}
	l.KeysTotal = ov.Stats.Buckets
	if q != "" {
		keys, total := s.Telemetry.State.Search(now, q, dashSearchLimit)
		sr := &web.SearchResult{Query: q, Total: total}
		for _, k := range keys {
			sr.Keys = append(sr.Keys, keyRow(k, now))
		}
		l.Search = sr
	}
	for _, n := range ov.Nodes {
		l.Nodes = append(l.Nodes, web.NodeRow{
			ID: n.ID, LastReport: ago(now.Sub(n.LastReport)), Stale: n.Stale, Version: n.Version, Hash: n.ConfigHash,
			UpToDate: n.Version > 0 && n.Version == l.Current, VMs: n.VMs, Rate: rate(n.Rates.Sum()),
			Received: count(n.Received), Rejected: count(n.Rejected), Dropped: count(n.Dropped),
		})
	}
	st := ov.Stats
	if !st.LastRefused.IsZero() && now.Sub(st.LastRefused) < boundsNoticeFor {
		l.BoundsNotice = fmt.Sprintf("Telemetry is at its bounds: %s new nodes, %s VMs and %s rules of VMs refused since the admin started, the last %s ago. "+
			"What was reporting keeps updating. If this is real traffic, raise -telemetry-max-bytes (%s of %s used).",
			count(st.Refused[telemetry.RefusedNode]), count(st.Refused[telemetry.RefusedVM]), count(st.Refused[telemetry.RefusedRule]),
			ago(now.Sub(st.LastRefused)), humanize.IBytes(uint64(st.UsedBytes)), humanize.IBytes(uint64(st.MaxBytes)))
	}
	l.Footer = fmt.Sprintf("%s · %s · %s tracked (%s evicted) · reports: %s accepted, %s duplicate, %s refused",
		pluralCount(st.Nodes, "node"), pluralCount(st.VMs, "VM"), pluralCount(st.Buckets, "bucket"), count(st.BucketsEvicted),
		count(st.Accepted), count(st.Duplicates), count(st.Rejected))
	return p, nil
}

// boundsNoticeFor is how long the dashboard shows that the telemetry
// bounds refused something.
const boundsNoticeFor = 5 * time.Minute

// ruleOverflow is a rule card's overflow line: nil when no overflow limit
// decided a request in the window and no identities share one.
func ruleOverflow(o telemetry.Overflow) *web.RuleOverflow {
	if o.Window == 0 && o.Rate == 0 && o.Identities == 0 {
		return nil
	}
	ro := &web.RuleOverflow{Rate: rate(o.Rate), Count: count(o.Window)}
	if o.Identities > 0 {
		ro.Identities = count(o.Identities)
	}
	return ro
}

// ruleActions is a rule card's line of what its action or overrides
// decided ("" when nothing): e.g. "1,204 decided by an override".
func ruleActions(a telemetry.Actions) string {
	var parts []string
	for _, x := range []struct {
		n    uint64
		what string
	}{{a.Exempted, "exempted"}, {a.Denied, "denied"}, {a.Overridden, "decided by an override"}, {a.Blocked, "clients blocked"}} {
		if x.n > 0 {
			parts = append(parts, count(x.n)+" "+x.what)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, " · ") + " (since the admin started)"
}

// keyMissing is a rule card's line of the requests it matched but could not
// key ("" for none), and whether it decided no request in the window: a
// rule keyed on a header or metadata that never arrives limits nothing.
func keyMissing(n uint64, window [telemetry.NumDecisions]uint64) (string, bool) {
	if n == 0 {
		return "", false
	}
	decided := uint64(0)
	for _, c := range window {
		decided += c
	}
	return count(n) + " matched without a value for a limit key, skipped (since the admin started)", decided == 0
}

// responseCosts is a rule card's line of its charges of costs the
// response reports ("" for a rule charged per request), and whether most
// of them were default_cost: the responses do not report what the rule
// reads (a wrong path or header, compressed bodies).
func responseCosts(r telemetry.ResponseCosts) (string, bool) {
	if r.Charged == 0 {
		return "", false
	}
	line := count(r.Charged) + " responses charged, " + count(r.Default) + " of them default_cost"
	if r.Invalid > 0 {
		line += " (" + count(r.Invalid) + " reported something that is not a cost)"
	}
	return line + " (since the admin started)", r.Default*2 > r.Charged
}

func dashURL(path, window, q string, fragment bool) string {
	v := url.Values{}
	if fragment {
		v.Set("fragment", "1")
	}
	v.Set("window", window)
	if q != "" {
		v.Set("q", q)
	}
	return path + "?" + v.Encode()
}

func decisionLabel(d telemetry.Decision) string {
	return strings.ReplaceAll(d.String(), "_", "-")
}

func keyRow(k telemetry.KeyView, now time.Time) web.KeyRow {
	pct := 0.0
	if k.Burst > 0 {
		pct = math.Min(math.Max(k.Tokens/k.Burst*100, 0), 100)
	}
	class := "high"
	switch {
	case pct < 20:
		class = "low"
	case pct < 50:
		class = "mid"
	}
	return web.KeyRow{
		Rule: k.Rule, Node: k.Node, Nodes: k.Nodes, Identity: printableText(k.Identity),
		Tokens:    fillLabel(k),
		FillWidth: strconv.FormatFloat(pct, 'f', 1, 64), FillClass: class, FillPct: strconv.FormatFloat(pct, 'f', 0, 64) + " %",
		Recent: count(k.Recent), Total: count(k.Total), Seen: ago(now.Sub(k.Seen)), Masked: k.MaskedMatch,
	}
}

// fillLabel is the text next to a key's fill bar: "tokens / burst" for a
// token bucket, "remaining / limit left" for a window (whose Tokens is the
// quota left and Burst the limit).
func fillLabel(k telemetry.KeyView) string {
	if k.Algorithm != "" && k.Algorithm != policy.AlgorithmTokenBucket {
		return num(k.Tokens) + " / " + num(k.Burst) + " left"
	}
	return num(k.Tokens) + " / " + num(k.Burst)
}

// printableText shows control characters (and invalid UTF-8) escaped, as
// Go would quote them; other text is unchanged.
func printableText(s string) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// share formats part/all as a percentage: "9.9 %", "0.04 %".
func share(part, all uint64) string {
	p := float64(part) / float64(all) * 100
	switch {
	case part == 0:
		return "0 %"
	case p < 0.1:
		return "< 0.1 %"
	case p < 10:
		return strconv.FormatFloat(p, 'f', 1, 64) + " %"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + " %"
}

// count formats a count with thousands separators: 1,234,567.
func count[T ~uint64 | ~int](n T) string {
	s := strconv.FormatUint(uint64(n), 10)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	pre := len(s) % 3
	if pre > 0 {
		b.WriteString(s[:pre])
	}
	for i := pre; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

func pluralCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return count(n) + " " + noun + "s"
}

// rate formats requests per second.
func rate(v float64) string {
	switch {
	case v >= 1e6:
		return num(v/1e6) + "M/s"
	case v >= 1e4:
		return num(math.Round(v/100)/10) + "k/s"
	case v >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64) + "/s"
	}
	return num(v) + "/s"
}

// num formats a number with at most two decimals, trailing zeros trimmed.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

// ago formats how long ago something happened.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s ago"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + " s ago"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + " min ago"
	}
	return strconv.Itoa(int(d.Hours())) + " h ago"
}

// dashboardEvents is GET /dashboard/events: a text/event-stream of
// "update" events, each carrying the live fragment (as dashboardPage with
// fragment=1 renders it) whenever the telemetry changed, and at least
// every few seconds (the charts move with time).
func (s *server) dashboardEvents(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	if s.Telemetry == nil {
		http.NotFound(w, r)
		return nil
	}
	if _, _, err := parseWindow(r.URL.Query().Get("window")); err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) error {
		// Past the server's WriteTimeout: each write gets its own deadline.
		rc.SetWriteDeadline(time.Now().Add(15 * time.Second)) // errors: not supported, fine
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := write([]byte("retry: 2000\n\n")); err != nil {
		return nil
	}
	ctx := r.Context()
	tick := time.NewTicker(eventsTick)
	defer tick.Stop()
	end := time.NewTimer(eventsMaxStream)
	defer end.Stop()
	var (
		lastGen  uint64
		lastSent time.Time
		lastAuth = time.Now()
		buf      bytes.Buffer
		frame    bytes.Buffer
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.Telemetry.Done: // nil: never
			return nil
		case <-end.C:
			return nil
		case <-tick.C:
		}
		if time.Since(lastAuth) >= eventsAuthEvery {
			if !s.sessionValid(ctx, r) {
				return nil
			}
			lastAuth = time.Now()
		}
		window, _, _ := parseWindow(r.URL.Query().Get("window"))
		ov := s.Telemetry.State.Overview(s.now(), telemetry.OverviewOptions{Window: window, Points: dashPoints, TopN: dashTopKeys})
		if ov.Gen == lastGen && time.Since(lastSent) < eventsIdle {
			continue
		}
		p, err := s.dashboardView(r, sess)
		if err != nil {
			return nil
		}
		buf.Reset()
		if err := web.DashboardFragment(p.Live).Render(ctx, &buf); err != nil {
			return nil
		}
		frame.Reset()
		frame.WriteString("event: update\n")
		for line := range strings.SplitSeq(strings.ReplaceAll(buf.String(), "\r", ""), "\n") {
			frame.WriteString("data: ")
			frame.WriteString(line)
			frame.WriteByte('\n')
		}
		frame.WriteByte('\n')
		if err := write(frame.Bytes()); err != nil {
			return nil
		}
		lastGen, lastSent = ov.Gen, time.Now()
	}
}

func (s *server) sessionValid(ctx context.Context, r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	_, err = s.Auth.Session(ctx, c.Value)
	return err == nil || !errors.Is(err, auth.ErrNoSession) // a database hiccup does not end the stream
}
