// Package httpapi is the admin's HTTP front: the JSON API under /api/v1
// (bearer token) and the dashboard pages (login session, CSRF-protected
// forms) rendered by web's templ components.
//
// Handlers are thin: they decode the request, call the policy service
// (the Policies interface) and encode the answer. Every route but /login,
// /healthz and /static requires authentication, reads included: the policy
// is operational data an anonymous visitor has no business reading. Every
// authenticated route also checks the caller's role (requiredRole), and
// every change is written to the audit log.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/envoygateway"
	"github.com/sluice-rl/sluice/admin/istio"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/shared/policycheck"
	"github.com/sluice-rl/sluice/web"
)

// Policies is the policy service (admin/policies.Service implements it).
type Policies interface {
	Current(ctx context.Context) (policies.Version, error)
	Get(ctx context.Context, n int64) (policies.Version, error)
	List(ctx context.Context, before int64, limit int) (policies.Page, error)
	Diff(ctx context.Context, from, to int64) (policies.Diff, error)
	Save(ctx context.Context, r policies.SaveRequest) (policies.Version, error)
	Rollback(ctx context.Context, r policies.RollbackRequest) (policies.Version, error)
	LastPublish() policies.PublishStatus
	CheckScope(ctx context.Context, sc policies.Scope, base int64, draft []byte) error
	Tests(ctx context.Context) (policies.Tests, error)
	SaveTests(ctx context.Context, r policies.SaveTestsRequest) (policies.Tests, error)
	RunTests(ctx context.Context, doc []byte, body string) (policycheck.Report, int64, error)
	ReviewRequired() bool
	// ReviewPolicies are the policies whose changes wait for review
	// (empty: every change, when review is required).
	ReviewPolicies() policies.Scope
	// FileStatus is the last look at the file the policy follows; ok is
	// false when it follows none.
	FileStatus() (st policies.FileStatus, ok bool)
	Changes(ctx context.Context, state string, limit int) ([]policies.Change, error)
	Change(ctx context.Context, id int64) (policies.Change, error)
	Approve(ctx context.Context, r policies.ReviewRequest) (policies.Version, error)
	Reject(ctx context.Context, r policies.ReviewRequest) (policies.Change, error)
	Withdraw(ctx context.Context, r policies.ReviewRequest) (policies.Change, error)
	// Reset makes every Envoy forget one identity's state under one rule;
	// Resets lists the recent ones, newest first.
	Reset(ctx context.Context, r policies.ResetRequest) (policies.Reset, error)
	Resets(ctx context.Context, limit int) ([]policies.Reset, error)
}

// Auth checks credentials and manages sessions, accounts and API tokens
// (admin/auth.Manager implements it).
type Auth interface {
	Authenticate(ctx context.Context, bearer string) (auth.Principal, error)
	Login(ctx context.Context, token, author string) (string, auth.Session, error)
	LoginPassword(ctx context.Context, user, password string) (string, auth.Session, error)
	Session(ctx context.Context, id string) (auth.Session, error)
	Logout(ctx context.Context, id string) error
	Accounts
}

// Accounts manages users and API tokens (admin/auth.Manager implements it).
type Accounts interface {
	Users(ctx context.Context) ([]store.User, error)
	CreateScopedUser(ctx context.Context, name string, role auth.Role, password, policies string) error
	UpdateAccount(ctx context.Context, name string, role auth.Role, password string, policies *string) error
	DeleteUser(ctx context.Context, name string) error
	Tokens(ctx context.Context) ([]store.APIToken, error)
	CreateToken(ctx context.Context, user, label string) (string, store.APIToken, error)
	RevokeToken(ctx context.Context, id string) (store.APIToken, error)
}

// AuditLog is the append-only audit log (admin/store.Store implements it).
type AuditLog interface {
	AppendAudit(ctx context.Context, e store.AuditEntry) error
	ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error)
}

// Config wires the handler.
type Config struct {
	Policies Policies
	Auth     Auth
	Nodes    NodeLister    // nil: no xDS server in this process
	Istio    istio.Options // how the WasmPlugin is rendered
	// EnvoyGateway: how the EnvoyExtensionPolicy is rendered.
	EnvoyGateway envoygateway.Options
	// Exported, if set, is the configuration the exported manifests
	// (WasmPlugin, EnvoyExtensionPolicy) carry for version v: its JSON
	// with the recent resets, as the admin pushes it over xDS, so that
	// applying the manifest again after a reset delivers it. nil: the
	// version's JSON.
	Exported func(ctx context.Context, v policies.Version) []byte
	Logger   *slog.Logger

	// SecureCookies marks cookies Secure even on plain-HTTP requests: set it
	// when a TLS-terminating proxy sits in front of the admin. Requests that
	// arrive over TLS always get Secure cookies.
	SecureCookies bool

	// MaxBodyBytes bounds request bodies (default DefaultMaxBody).
	MaxBodyBytes int64

	// Telemetry enables the telemetry ingestion, the dashboard's data, the
	// telemetry page and /metrics (nil: the dashboard says it is off).
	Telemetry *Telemetry

	// Fleet adds the "Global rules" section to the dashboard (nil: fleet
	// mode is off).
	Fleet Fleet

	// Trials runs shadow trials of drafts (nil: no xDS server, no trials).
	Trials Trials

	// Audit records every change, login and lockout (nil: not recorded).
	Audit AuditLog
	// Throttle slows and refuses failed logins and bad bearer tokens (nil:
	// a new one with auth.DefaultThrottle).
	Throttle *auth.Throttle
	// TrustedProxies are the proxies whose X-Forwarded-For names the client
	// (for throttling and the audit log); empty: the peer is the client.
	TrustedProxies []netip.Prefix
	// OIDC adds "Log in with <provider>" (nil: off).
	OIDC *OIDC
	// Sleep waits before answering a delayed login (default: a timer; tests
	// replace it).
	Sleep func(ctx context.Context, d time.Duration)
}

// DefaultMaxBody is the default request body limit: 4 MiB, room for a
// configuration of policies.MaxConfigBytes sent as JSON or a form.
const DefaultMaxBody = 4 << 20

// Cookie names.
const (
	sessionCookie = "sluice_session"
	loginCookie   = "sluice_login"
)

type server struct {
	Config
	log *slog.Logger
	cop *http.CrossOriginProtection

	versions versionFactsCache // the dashboard's view of policy versions (version_facts.go)
}

// New returns the admin's HTTP handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Policies == nil || cfg.Auth == nil {
		return nil, errors.New("httpapi: Policies and Auth are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBody
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if t := cfg.Telemetry; t != nil && (t.State == nil || t.Tokens == nil) {
		return nil, errors.New("httpapi: Telemetry needs State and Tokens")
	}
	if cfg.Throttle == nil {
		cfg.Throttle = auth.NewThrottle(auth.DefaultThrottle)
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if o := cfg.OIDC; o != nil {
		if o.Verifier == nil || o.OAuth2.ClientID == "" {
			return nil, errors.New("httpapi: OIDC needs Verifier and OAuth2.ClientID")
		}
		if o.Login == nil {
			l, ok := cfg.Auth.(ExternalLogin)
			if !ok {
				return nil, errors.New("httpapi: OIDC needs Login (Auth does not implement ExternalLogin)")
			}
			c := *o
			c.Login = l
			cfg.OIDC = &c
		}
	}
	cfg.Policies = maskingPolicies{cfg.Policies} // no handler sees a secret
	s := &server{Config: cfg, log: cfg.Logger.With("component", "http"), cop: http.NewCrossOriginProtection()}
	mux := http.NewServeMux()

	// JSON API, bearer token.
	mux.Handle("GET /api/v1/policy", s.api(s.apiCurrent))
	mux.Handle("POST /api/v1/policy", s.api(s.apiSave))
	mux.Handle("POST /api/v1/policy/validate", s.api(s.apiValidate))
	mux.Handle("POST /api/v1/policy/simulate", s.api(s.apiSimulate))
	mux.Handle("POST /api/v1/policy/overrides", s.api(s.apiOverrides))
	mux.Handle("POST /api/v1/policy/migrate", s.api(s.apiMigrate))
	mux.Handle("GET /api/v1/policy/versions", s.api(s.apiList))
	mux.Handle("GET /api/v1/policy/versions/{n}", s.api(s.apiGet))
	mux.Handle("GET /api/v1/policy/diff", s.api(s.apiDiff))
	mux.Handle("POST /api/v1/policy/rollback", s.api(s.apiRollback))
	mux.Handle("GET /api/v1/policy/export", s.api(s.apiExport))
	mux.Handle("GET /api/v1/policy/schema", s.api(s.apiSchema))
	mux.Handle("GET /api/v1/istio/wasmplugin", s.api(s.apiIstio))
	mux.Handle("GET /api/v1/nodes", s.api(s.apiNodes))
	s.registerEnvoyGateway(mux)
	if s.Telemetry != nil {
		s.registerTelemetry(mux)
	}
	s.registerAccounts(mux)
	s.registerTrial(mux)
	s.registerTests(mux)
	s.registerChanges(mux)
	s.registerResets(mux)
	s.registerOpenAPI(mux)
	mux.Handle("/api/", s.api(func(w http.ResponseWriter, r *http.Request) error {
		return &apiErr{status: http.StatusNotFound, msg: "no such endpoint: " + r.Method + " " + r.URL.Path + " (see docs/admin.md)"}
	}))

	// Pages, session cookie.
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.loginSubmit)
	if s.OIDC != nil {
		s.registerOIDC(mux)
	}
	mux.Handle("POST /logout", s.page(s.logout))
	s.registerDashboard(mux)
	mux.Handle("GET /{$}", s.page(s.editorPage))
	mux.Handle("POST /policy", s.page(s.editorSubmit))
	mux.Handle("POST /simulate", s.page(s.simulateSubmit))
	mux.Handle("POST /policy/rules", s.page(s.rulesSubmit))
	mux.Handle("GET /policy/overrides", s.page(s.overridesPage))
	mux.Handle("POST /policy/overrides", s.page(s.overridesSubmit))
	mux.Handle("GET /policy/migrate", s.page(s.migratePage))
	mux.Handle("POST /policy/migrate", s.page(s.migrateSubmit))
	mux.Handle("GET /history", s.page(s.historyPage))
	mux.Handle("GET /history/{n}", s.page(s.versionPage))
	mux.Handle("POST /rollback", s.page(s.rollbackSubmit))
	mux.Handle("GET /nodes", s.page(s.nodesPage))
	mux.Handle("GET /istio", s.page(s.istioPage))
	mux.Handle("GET /istio/wasmplugin.yaml", s.page(s.istioDownload))
	mux.Handle("GET /istio/wasmplugin.json", s.page(s.istioDownload))
	mux.Handle("GET /export", s.page(s.exportDownload))
	mux.Handle("GET /schema.json", s.page(s.schemaDownload))
	mux.HandleFunc("GET /static/{name}", s.static)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.renderError(w, r, web.Nav{}, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
	})
	return s.secure(mux), nil
}

// secure adds the security headers, refuses cross-origin state changes and
// turns a panicking handler into a 500 instead of a dropped connection.
func (s *server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if r.TLS != nil {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
				http.Error(w, "internal error; see the admin's log", http.StatusInternalServerError)
			}
		}()
		// Browsers say where a request comes from (Sec-Fetch-Site, Origin);
		// a state change from another site is refused whatever its cookies.
		if err := s.cop.Check(r); err != nil {
			if strings.HasPrefix(r.URL.Path, "/api/") {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused: " + err.Error()})
			} else {
				s.renderError(w, r, web.Nav{}, http.StatusForbidden, "Request refused", "This form was submitted from another site ("+err.Error()+").")
			}
			return
		}
		next.ServeHTTP(w, r)
	})
}

// render writes a templ component as an HTML page with the given status.
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.Render(r.Context(), w); err != nil {
		s.log.Warn("rendering a page failed", "path", r.URL.Path, "err", err)
	}
}

func (s *server) renderError(w http.ResponseWriter, r *http.Request, nav web.Nav, status int, title, msg string) {
	s.render(w, r, status, web.Error(web.ErrorPage{Nav: nav, Status: status, Title: title, Message: msg}))
}

// secureCookie says whether cookies for r must be marked Secure.
func (s *server) secureCookie(r *http.Request) bool { return s.SecureCookies || r.TLS != nil }

// limitBody caps the request body at MaxBodyBytes.
func (s *server) limitBody(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, s.MaxBodyBytes)
}

func isTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

func (s *server) tooLargeMessage() string {
	return fmt.Sprintf("request body too large: the limit is %d bytes", s.MaxBodyBytes)
}

// timeText formats a time for people.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func parseVersion(s, field string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, &policies.InputError{Field: field, Message: fmt.Sprintf("%q is not a version number", s)}
	}
	return n, nil
}
