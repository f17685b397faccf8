package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/istio"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/web"
)

// page wraps a page handler: it requires a session (else redirects to the
// login page) and, for POST, a valid CSRF token tied to that session.
func (s *server) page(h func(http.ResponseWriter, *http.Request, auth.Session) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sess auth.Session
		var err error
		if c, cerr := r.Cookie(sessionCookie); cerr == nil {
			sess, err = s.Auth.Session(r.Context(), c.Value)
		} else {
			err = auth.ErrNoSession
		}
		if err != nil {
			if !errors.Is(err, auth.ErrNoSession) {
				s.log.Error("reading the session failed", "err", err)
				s.renderError(w, r, web.Nav{}, http.StatusInternalServerError, "Internal error", "The session could not be read; see the admin's log.")
				return
			}
			next := r.URL.RequestURI()
			if r.Method != http.MethodGet {
				next = "/"
			}
			if r.URL.Query().Get("fragment") != "" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(next), http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			s.limitBody(w, r)
			if err := s.parsePostForm(r); err != nil {
				if isTooLarge(err) {
					s.renderError(w, r, nav(sess, ""), http.StatusRequestEntityTooLarge, "Too large", s.tooLargeMessage()+".")
				} else {
					s.renderError(w, r, nav(sess, ""), http.StatusBadRequest, "Bad request", "The form could not be read: "+err.Error())
				}
				return
			}
			if !auth.Equal(r.PostForm.Get("csrf"), sess.CSRF) {
				s.renderError(w, r, nav(sess, ""), http.StatusForbidden, "Form expired",
					"The form did not carry this session's security token (CSRF check failed): it is from an older session or another site. Reload the page and try again.")
				return
			}
		}
		p := sess.Principal()
		if need := requiredRole(r.Method, r.URL.Path); !p.Role.Allows(need) {
			s.renderError(w, r, nav(sess, ""), http.StatusForbidden, "Not allowed", "You are logged in as "+p.Name+": "+forbiddenMessage(p, need)+".")
			return
		}
		r = withPrincipal(r, p)
		if err := h(w, r, sess); err != nil {
			s.pageError(w, r, sess, err)
		}
	})
}

// parsePostForm reads a form, urlencoded or (a file upload) multipart,
// into r.PostForm; the body is already bounded by limitBody, so a
// multipart form is read into memory whole.
func (s *server) parsePostForm(r *http.Request) error {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		return r.ParseMultipartForm(s.MaxBodyBytes)
	}
	return r.ParseForm()
}

// pageError renders the error page for errors the handler did not render
// itself.
func (s *server) pageError(w http.ResponseWriter, r *http.Request, sess auth.Session, err error) {
	var ie *policies.InputError
	var nfe *policies.NotFoundError
	var pe *policies.ProposedError
	if errors.As(err, &pe) { // a save under review: see the change
		s.recordProposal(r, pe.Change)
		http.Redirect(w, r, "/changes/"+i64s(pe.Change.ID)+"?proposed=1", http.StatusSeeOther)
		return
	}
	if status, body, ok := s.reviewError(r, err); ok {
		s.renderError(w, r, nav(sess, ""), status, http.StatusText(status), fmt.Sprint(body["error"])+".")
		return
	}
	switch {
	case errors.As(err, &nfe):
		s.renderError(w, r, nav(sess, ""), http.StatusNotFound, "Not found", nfe.Error()+".")
	case errors.As(err, &ie):
		s.renderError(w, r, nav(sess, ""), http.StatusBadRequest, "Bad request", ie.Error())
	default:
		s.log.Error("page failed", "method", r.Method, "path", r.URL.Path, "err", err)
		s.renderError(w, r, nav(sess, ""), http.StatusInternalServerError, "Internal error", "Something went wrong; see the admin's log.")
	}
}

func nav(sess auth.Session, active string) web.Nav {
	return web.Nav{Active: active, Author: sess.Author, CSRF: sess.CSRF, Role: string(sess.Role), Policies: scopeOf(sess.Principal()).String()}
}

// localPath returns next if it is a path on this site, else "/": the
// login redirect must not send anyone elsewhere.
func localPath(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return next
}

func (s *server) loginPage(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	if r.URL.Query().Get("next") == "" {
		next = "/dashboard" // the landing page
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if _, err := s.Auth.Session(r.Context(), c.Value); err == nil {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
	}
	s.showLogin(w, r, http.StatusOK, web.LoginPage{Next: next})
}

// showLogin renders the login form with a fresh login CSRF token, set as a
// cookie and echoed in the form (double submit): a login form posted from
// another site cannot know it.
func (s *server) showLogin(w http.ResponseWriter, r *http.Request, status int, p web.LoginPage) {
	p.CSRF = auth.RandomToken()
	if s.OIDC != nil {
		p.OIDCName = s.OIDC.Name
	}
	http.SetCookie(w, &http.Cookie{
		Name: loginCookie, Value: p.CSRF, Path: "/login", MaxAge: 3600,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r),
	})
	s.render(w, r, status, web.Login(p))
}

func (s *server) loginSubmit(w http.ResponseWriter, r *http.Request) {
	s.limitBody(w, r)
	if err := r.ParseForm(); err != nil {
		if isTooLarge(err) {
			s.renderError(w, r, web.Nav{}, http.StatusRequestEntityTooLarge, "Too large", s.tooLargeMessage()+".")
			return
		}
		s.showLogin(w, r, http.StatusBadRequest, web.LoginPage{Error: "The form could not be read: " + err.Error()})
		return
	}
	p := web.LoginPage{Name: r.PostForm.Get("name"), User: r.PostForm.Get("user"), Next: localPath(r.PostForm.Get("next"))}
	c, err := r.Cookie(loginCookie)
	if err != nil || !auth.Equal(c.Value, r.PostForm.Get("csrf")) {
		p.Error = "The login form expired or came from another site. Try again (cookies must be enabled)."
		s.showLogin(w, r, http.StatusForbidden, p)
		return
	}
	name := strings.TrimSpace(p.Name)
	if n := utf8.RuneCountInString(name); n > policies.MaxAuthorLen || !printable(name) {
		p.Error = fmt.Sprintf("Your name must be at most %d printable characters.", policies.MaxAuthorLen)
		s.showLogin(w, r, http.StatusBadRequest, p)
		return
	}
	user, token := strings.TrimSpace(p.User), r.PostForm.Get("token")
	if user != "" && auth.CheckUserName(user) != nil {
		user = "(invalid name)" // counted and recorded, never looked up
	}
	// Throttle: a password login counts against (address, user), a token
	// login against the address.
	addr, method, account, who := s.clientAddr(r), "password", user, user
	if token != "" || user == "" {
		method, account, who = "token", "", "(admin token)"
	}
	d := s.Throttle.Check(addr, account)
	if d.Refuse {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(d)))
		p.Error = fmt.Sprintf("Too many failed attempts from your address. Try again in %d seconds.", retrySeconds(d))
		s.showLogin(w, r, http.StatusTooManyRequests, p)
		return
	}
	s.Sleep(r.Context(), d.Delay)
	var id string
	var sess auth.Session
	if method == "token" {
		id, sess, err = s.Auth.Login(r.Context(), token, name)
	} else {
		id, sess, err = s.Auth.LoginPassword(r.Context(), user, r.PostForm.Get("password"))
	}
	if errors.Is(err, auth.ErrBadToken) || errors.Is(err, auth.ErrBadCredentials) {
		s.log.Warn("failed login", "remote", addr, "user", user)
		s.failed(r, method, addr, account, auth.Principal{Name: who})
		p.Error = "Wrong user name or password."
		if method == "token" {
			p.Error = "Wrong token."
		}
		s.showLogin(w, r, http.StatusUnauthorized, p)
		return
	}
	if err != nil {
		s.log.Error("login failed", "err", err)
		s.renderError(w, r, web.Nav{}, http.StatusInternalServerError, "Internal error", "Logging in failed; see the admin's log.")
		return
	}
	s.Throttle.Succeed(addr, account)
	s.loggedIn(w, r, id, sess, addr, "by "+method, p.Next)
}

// loggedIn records a login, sets the session cookie, clears the login
// form's cookie and sends the browser to next.
func (s *server) loggedIn(w http.ResponseWriter, r *http.Request, id string, sess auth.Session, addr, detail, next string) {
	s.record(r, store.AuditEntry{Action: ActionLogin, Actor: sess.Principal().Name, Remote: addr, Detail: detail})
	secure := s.secureCookie(r)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/", MaxAge: int(auth.SessionTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure,
	})
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/login", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return false
		}
	}
	return true
}

func (s *server) logout(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if err := s.Auth.Logout(r.Context(), c.Value); err != nil {
			return err
		}
	}
	s.record(r, store.AuditEntry{Action: ActionLogout})
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie(r)})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

func versionInfo(v policies.Version, current int64) web.VersionInfo {
	return web.VersionInfo{
		Number: v.Number, Parent: v.Parent, RollbackOf: v.RollbackOf, Author: v.Author, Message: v.Message,
		Created: timeText(v.Created), CreatedISO: isoTime(v.Created), Current: v.Number == current,
	}
}

func rows(text string) int { return min(max(strings.Count(text, "\n")+2, 16), 48) }

// flashFromQuery turns the numbers a redirect carries into a notice.
func flashFromQuery(q url.Values) []web.Flash {
	num := func(k string) (int64, bool) {
		n, err := strconv.ParseInt(q.Get(k), 10, 64)
		return n, err == nil && n > 0
	}
	if n, ok := num("saved"); ok {
		return []web.Flash{{Kind: "ok", Text: fmt.Sprintf("Saved v%d; it is being pushed to every connected Envoy.", n)}}
	}
	if n, ok := num("restored"); ok {
		if from, ok := num("from"); ok {
			return []web.Flash{{Kind: "ok", Text: fmt.Sprintf("Rolled back: v%d restores v%d and is being pushed to every connected Envoy.", n, from)}}
		}
	}
	return nil
}

func (s *server) editorPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	draft := cur.Pretty()
	p := web.EditorPage{
		Nav: nav(sess, "policy"), Flashes: flashFromQuery(r.URL.Query()), Review: s.Policies.ReviewRequired(), ReviewOnly: s.Policies.ReviewPolicies().String(),
		Current: versionInfo(cur, cur.Number), BaseVersion: cur.Number, Draft: draft, Rows: rows(draft),
		Rules: rulesView(draft, nil, scopeOf(sess.Principal())), Follows: s.follows(),
	}
	if canEdit(sess) {
		p.Import = importForm(sess, cur) // overrides_page.go
	}
	if ps := s.Policies.LastPublish(); ps.Err != nil {
		p.Flashes = append(p.Flashes, web.Flash{Kind: "error", Text: fmt.Sprintf("Publishing v%d failed: %v", ps.Version, ps.Err)})
	}
	for _, w := range cur.Warnings() {
		p.Flashes = append(p.Flashes, web.Flash{Kind: "warn", Text: fmt.Sprintf("v%d, %s", cur.Number, w)})
	}
	if s.Trials != nil {
		if t, ok := s.Trials.Running(); ok {
			p.Flashes = append(p.Flashes, web.Flash{Kind: "warn", Text: fmt.Sprintf(
				"Trial %d by %s runs its draft in shadow until %s (see the Trial page); a save now is pushed with the trial's rules.", t.ID, t.Author, timeText(t.Ends))})
		}
	}
	s.render(w, r, http.StatusOK, web.Editor(p))
	return nil
}

// draftPage is the policy page showing a submitted draft over the current
// version cur (the next save based on it).
func draftPage(sess auth.Session, cur policies.Version, draft, message string) web.EditorPage {
	return web.EditorPage{
		Nav: nav(sess, "policy"), Current: versionInfo(cur, cur.Number), BaseVersion: cur.Number,
		Draft: draft, Message: message, Rows: rows(draft), Rules: rulesView(draft, nil, scopeOf(sess.Principal())),
	}
}

// submittedDraft is the policy page of the draft a form of it posted (its
// "policy" and "message" fields) over the current version cur.
func (s *server) submittedDraft(r *http.Request, sess auth.Session) (p web.EditorPage, cur policies.Version, err error) {
	draft := strings.ReplaceAll(r.PostForm.Get("policy"), "\r\n", "\n")
	if cur, err = s.Policies.Current(r.Context()); err != nil {
		return p, cur, err
	}
	p = draftPage(sess, cur, draft, r.PostForm.Get("message"))
	p.Review = s.Policies.ReviewRequired()
	return p, cur, nil
}

func (s *server) editorSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	p, cur, err := s.submittedDraft(r, sess)
	if err != nil {
		return err
	}
	draft, msg := p.Draft, p.Message
	base, err := parseVersion(r.PostForm.Get("base_version"), "base_version")
	if err != nil {
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + err.Error()}}
		s.render(w, r, http.StatusBadRequest, web.Editor(p))
		return nil
	}
	p.BaseVersion = base
	skip := r.PostForm.Get("skip_tests") == "on"
	v, err := s.Policies.Save(r.Context(), policies.SaveRequest{Base: base, JSON: []byte(draft), Author: sess.Author, Message: msg,
		Scope: scopeOf(principal(r)), SkipTests: skip})
	var (
		ve *policies.ValidationError
		ce *policies.ConflictError
		ie *policies.InputError
		tf *policies.TestsFailedError
	)
	switch {
	case err == nil:
		s.record(r, store.AuditEntry{Action: ActionSave, Version: v.Number, FromVersion: base, Detail: saveDetail(msg, skip)})
		http.Redirect(w, r, "/?saved="+strconv.FormatInt(v.Number, 10), http.StatusSeeOther)
	case errors.As(err, &tf):
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + tf.Error() + "."}}
		p.TestReport, p.OfferSkipTests = reportView("the draft", tf.Revision, tf.Report), true
		s.render(w, r, http.StatusUnprocessableEntity, web.Editor(p))
	case errors.As(err, &ve):
		p.Problems, p.Listing = annotate([]byte(draft), ve.Errors)
		s.render(w, r, http.StatusUnprocessableEntity, web.Editor(p))
	case errors.As(err, &ce):
		// Keep the draft; compare it with what is current now, and base the
		// next save on that (the person has seen the difference).
		p.BaseVersion = cur.Number
		theirs := cur.Pretty()
		mine := policies.Pretty([]byte(draft))
		if norm, verr := policies.Validate([]byte(draft)); verr == nil {
			mine = policies.Pretty(policy.MaskSecrets(norm))
		}
		p.Conflict = &web.Conflict{
			Base: base, Current: versionInfo(cur, cur.Number), Message: ce.Error(),
			Diff: diffView(fmt.Sprintf("v%d (current)", cur.Number), "your draft", policies.LineDiff(theirs, mine)),
		}
		s.render(w, r, http.StatusConflict, web.Editor(p))
	case errors.As(err, &ie):
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + ie.Error()}}
		s.render(w, r, http.StatusBadRequest, web.Editor(p))
	case refused(err) != 0:
		p.Flashes = []web.Flash{{Kind: "error", Text: "Not saved: " + err.Error()}}
		s.render(w, r, refused(err), web.Editor(p))
	default:
		return err
	}
	return nil
}

// annotate places each problem on the line of the draft it concerns.
func annotate(draft []byte, es policy.Errors) ([]web.Problem, []web.ListingLine) {
	loc := policies.NewLocator(draft)
	lines := strings.Split(strings.TrimSuffix(string(draft), "\n"), "\n")
	listing := make([]web.ListingLine, len(lines))
	for i, l := range lines {
		listing[i] = web.ListingLine{Number: i + 1, Text: l}
	}
	problems := make([]web.Problem, len(es))
	for i, e := range es {
		pr := web.Problem{Path: e.Path, Message: e.Message}
		if pos, ok := loc.Locate(e); ok && pos.Line >= 1 && pos.Line <= len(listing) {
			pr.Line = pos.Line
			listing[pos.Line-1].Problems = append(listing[pos.Line-1].Problems, pr)
		} else if len(listing) > 0 {
			// Not placeable (e.g. an empty document): show it on line 1.
			listing[0].Problems = append(listing[0].Problems, pr)
		}
		problems[i] = pr
	}
	return problems, listing
}

func diffView(from, to string, hs []policies.Hunk) web.DiffView {
	d := web.DiffView{From: from, To: to}
	num := func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	for _, h := range hs {
		hv := web.Hunk{Header: h.Header()}
		for _, l := range h.Lines {
			dl := web.DiffLine{Text: l.Text, Old: num(l.OldLine), New: num(l.NewLine), Sign: string(rune(l.Kind))}
			switch l.Kind {
			case policies.Added:
				dl.Kind = "add"
			case policies.Removed:
				dl.Kind = "del"
			default:
				dl.Kind = "ctx"
			}
			hv.Lines = append(hv.Lines, dl)
		}
		d.Hunks = append(d.Hunks, hv)
	}
	return d
}

func (s *server) historyPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	var before int64
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := parseVersion(v, "before")
		if err != nil {
			return err
		}
		before = n
	}
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	pg, err := s.Policies.List(r.Context(), before, 50)
	if err != nil {
		return err
	}
	p := web.HistoryPage{Nav: nav(sess, "history"), Flashes: flashFromQuery(r.URL.Query()), Current: cur.Number, NextBefore: pg.NextBefore, Paged: before > 0}
	for _, v := range pg.Versions {
		p.Versions = append(p.Versions, versionInfo(v, cur.Number))
	}
	s.render(w, r, http.StatusOK, web.History(p))
	return nil
}

func (s *server) versionPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	n, err := parseVersion(r.PathValue("n"), "version")
	if err != nil {
		return err
	}
	v, err := s.Policies.Get(r.Context(), n)
	if err != nil {
		return err
	}
	against := v.Parent
	if a := r.URL.Query().Get("against"); a != "" {
		if against, err = parseVersion(a, "against"); err != nil {
			return err
		}
	}
	d, err := s.Policies.Diff(r.Context(), against, n)
	if err != nil {
		return err
	}
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	from := "nothing"
	if against > 0 {
		from = fmt.Sprintf("v%d", against)
	}
	s.render(w, r, http.StatusOK, web.Version(web.VersionPage{
		Nav: nav(sess, "history"), Version: versionInfo(v, cur.Number), Against: against,
		Diff: diffView(from, fmt.Sprintf("v%d", n), d.Hunks), Pretty: v.Pretty(), Current: cur.Number,
	}))
	return nil
}

func (s *server) rollbackSubmit(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	to, err := parseVersion(r.PostForm.Get("to"), "to")
	if err != nil {
		return err
	}
	base, err := parseVersion(r.PostForm.Get("base_version"), "base_version")
	if err != nil {
		return err
	}
	v, err := s.Policies.Rollback(r.Context(), policies.RollbackRequest{To: to, Base: base, Author: sess.Author, Scope: scopeOf(principal(r))})
	var (
		ce *policies.ConflictError
		ve *policies.ValidationError
	)
	switch {
	case err == nil:
		s.record(r, store.AuditEntry{Action: ActionRollback, Version: v.Number, FromVersion: to, Detail: fmt.Sprintf("restores v%d over v%d", to, base)})
		http.Redirect(w, r, fmt.Sprintf("/history?restored=%d&from=%d", v.Number, to), http.StatusSeeOther)
		return nil
	case errors.As(err, &ce):
		s.renderError(w, r, nav(sess, "history"), http.StatusConflict, "Not rolled back",
			ce.Error()+". Look at the history again before rolling back.")
		return nil
	case errors.As(err, &ve):
		s.renderError(w, r, nav(sess, "history"), http.StatusUnprocessableEntity, "Not rolled back",
			fmt.Sprintf("v%d is not valid for the current filter, so it cannot be restored: %s", to, ve.Errors.Error()))
		return nil
	case refused(err) != 0:
		s.renderError(w, r, nav(sess, "history"), refused(err), "Not rolled back", err.Error())
		return nil
	}
	return err
}

// runsVersion says whether a node that ACKed the resource version acked
// runs policy version cur: the version itself, or it with resets added
// ("<n>+resets.<hash>"), which change no limit.
func runsVersion(acked, cur string) bool {
	return acked == cur || strings.HasPrefix(acked, cur+"+resets.")
}

func (s *server) nodesPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	cur, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	p := web.NodesPage{Nav: nav(sess, "nodes"), XDS: s.Nodes != nil, Current: cur.Number}
	ps := s.Policies.LastPublish()
	if ps.Version > 0 {
		p.Published = fmt.Sprintf("v%d at %s", ps.Version, timeText(ps.At))
	}
	if ps.Err != nil {
		p.PublishError = ps.Err.Error()
	}
	curText := strconv.FormatInt(cur.Number, 10)
	for _, n := range s.nodes() {
		p.Nodes = append(p.Nodes, web.NodeView{
			ID: n.ID, Cluster: n.Cluster, Connected: n.Connected, LastSeen: timeText(n.LastSeen),
			Acked: n.AckedVersion, UpToDate: runsVersion(n.AckedVersion, curText), NackedVersion: n.NackedVersion, NackError: n.NackError,
		})
	}
	if r.URL.Query().Get("fragment") != "" && p.XDS {
		s.render(w, r, http.StatusOK, web.NodesTable(p))
		return nil
	}
	s.render(w, r, http.StatusOK, web.Nodes(p))
	return nil
}

func (s *server) istioPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	format := r.URL.Query().Get("format")
	if format != "json" {
		format = "yaml"
	}
	target := r.URL.Query().Get("target")
	m, err := s.renderIstio(r, format)
	p := web.IstioPage{Nav: nav(sess, "istio"), Format: format, Manifest: string(m.body), Version: m.version.Number,
		Warnings: m.warnings, Target: target, Attached: s.istioAttachment(target)}
	if err != nil {
		s.log.Error("rendering the WasmPlugin failed", "err", err)
		p.Error = "The manifest could not be rendered: " + err.Error()
	}
	s.render(w, r, http.StatusOK, web.Istio(p))
	return nil
}

// istioAttachment says in words what the WasmPlugin attaches to: the
// query's targets, or the flags' targets or selector.
func (s *server) istioAttachment(target string) string {
	targets := s.Istio.Targets
	if target != "" {
		targets, _ = istio.ParseTargets(target)
	}
	switch {
	case len(targets) > 0:
		names := make([]string, len(targets))
		for i, t := range targets {
			names[i] = t.String()
		}
		return "the proxies of " + strings.Join(names, ", ")
	case len(s.Istio.Selector) > 0:
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(s.Istio.Selector)) {
			labels = append(labels, k+"="+s.Istio.Selector[k])
		}
		return "the workloads labelled " + strings.Join(labels, ",")
	}
	return "every workload of its namespace (mesh-wide from the root namespace)"
}

func (s *server) istioDownload(w http.ResponseWriter, r *http.Request, _ auth.Session) error {
	format := strings.TrimPrefix(path.Ext(r.URL.Path), ".")
	m, err := s.renderIstio(r, format)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", m.contentType)
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="sluice-wasmplugin-v%d.%s"`, m.version.Number, format))
	w.Write(m.body)
	return nil
}

func (s *server) exportDownload(w http.ResponseWriter, r *http.Request, _ auth.Session) error {
	v, err := s.Policies.Current(r.Context())
	if err != nil {
		return err
	}
	writeExport(w, v)
	return nil
}

func (s *server) schemaDownload(w http.ResponseWriter, r *http.Request, _ auth.Session) error {
	w.Header().Set("Content-Type", "application/schema+json")
	w.Write(policy.JSONSchema())
	return nil
}

// static serves the embedded assets. A request carrying the asset's
// current hash (?v=, as the pages link them) may be cached forever.
func (s *server) static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	b, err := fs.ReadFile(web.Static(), name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	hash := web.AssetHash(name)
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set("ETag", `"`+hash+`"`)
	if r.URL.Query().Get("v") == hash {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}
