package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/envoygateway"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/web"
)

func (s *server) registerEnvoyGateway(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/envoygateway/extensionpolicy", s.api(s.apiEnvoyGateway))
	mux.Handle("GET /envoy-gateway", s.page(s.envoyGatewayPage))
	mux.Handle("GET /envoy-gateway/extensionpolicy.yaml", s.page(s.envoyGatewayDownload))
	mux.Handle("GET /envoy-gateway/extensionpolicy.json", s.page(s.envoyGatewayDownload))
}

// renderEnvoyGateway renders the EnvoyExtensionPolicy for the current
// version; the query's target (Gateway/<name> or HTTPRoute/<name>) and
// namespace override the admin's -eg-* flags.
func (s *server) renderEnvoyGateway(r *http.Request, format string) ([]byte, string, policies.Version, error) {
	if format == "" {
		format = "yaml"
	}
	if format != "yaml" && format != "json" {
		return nil, "", policies.Version{}, &policies.InputError{Field: "format", Message: fmt.Sprintf("%q is not supported; use yaml or json", format)}
	}
	opts := s.EnvoyGateway
	q := r.URL.Query()
	if t := q.Get("target"); t != "" {
		if _, _, err := envoygateway.ParseTarget(t); err != nil {
			return nil, "", policies.Version{}, &policies.InputError{Field: "target", Message: strings.TrimPrefix(err.Error(), "target: ")}
		}
		opts.Target = t
	}
	if ns := q.Get("namespace"); ns != "" {
		opts.Namespace = ns
	}
	v, err := s.Policies.Current(r.Context())
	if err != nil {
		return nil, "", v, err
	}
	m, err := envoygateway.Render(s.exported(r.Context(), v), v.Number, opts)
	if err != nil {
		return nil, "", v, &policies.InputError{Field: "options", Message: err.Error()}
	}
	if format == "json" {
		return m.JSON(), "application/json; charset=utf-8", v, nil
	}
	y, err := m.YAML()
	return y, "application/yaml; charset=utf-8", v, err
}

func (s *server) apiEnvoyGateway(w http.ResponseWriter, r *http.Request) error {
	body, ct, _, err := s.renderEnvoyGateway(r, r.URL.Query().Get("format"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", ct)
	w.Write(body)
	return nil
}

func (s *server) envoyGatewayPage(w http.ResponseWriter, r *http.Request, sess auth.Session) error {
	format := r.URL.Query().Get("format")
	if format != "json" {
		format = "yaml"
	}
	target := r.URL.Query().Get("target")
	if target == "" {
		target = s.EnvoyGateway.Target
		if target == "" {
			target = envoygateway.DefaultTarget
		}
	}
	body, _, v, err := s.renderEnvoyGateway(r, format)
	p := web.EnvoyGatewayPage{Nav: nav(sess, "envoy-gateway"), Format: format, Manifest: string(body), Version: v.Number, Target: target,
		Notes: envoygateway.ClusterNotes(v.JSON)}
	if err != nil {
		p.Error = "The manifest could not be rendered: " + err.Error()
	}
	s.render(w, r, http.StatusOK, web.EnvoyGateway(p))
	return nil
}

func (s *server) envoyGatewayDownload(w http.ResponseWriter, r *http.Request, _ auth.Session) error {
	format := strings.TrimPrefix(path.Ext(r.URL.Path), ".")
	body, ct, v, err := s.renderEnvoyGateway(r, format)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="sluice-envoyextensionpolicy-v%d.%s"`, v.Number, format))
	w.Write(body)
	return nil
}

// exported is the configuration the manifests carry for version v
// (Config.Exported).
func (s *server) exported(ctx context.Context, v policies.Version) []byte {
	if s.Exported == nil {
		return v.JSON
	}
	return s.Exported(ctx, v)
}
