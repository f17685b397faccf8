package helmtest

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/tlsfiles/tlstest"
)

// The chart's postgres.tlsSecret starts the admin on a PostgreSQL that
// requires verified TLS and a client certificate: rendered with URLs that
// name the Secret's files where the pod mounts them, run with those files
// in their place, the admin serves its first version from that database.
func TestChartEnvironmentReachesPostgresOverTLS(t *testing.T) {
	f := tlstest.WriteFiles(t, "postgres") // CN postgres: the database user, for pg_hba "cert"
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{TLS: &fleettest.PostgresTLS{
		Cert: f.CertFile, Key: f.KeyFile, CA: f.CAFile, ClientCerts: true}})
	const mount = "/etc/sluice-postgres-tls"
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s/ca.crt&sslcert=%s/tls.crt&sslkey=%s/tls.key",
		pg.Port, mount, mount, mount)
	objs, _, err := render(t, fmt.Sprintf("database: {url: %q}\npostgres: {tlsSecret: pg-client}\n", url))
	if err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	if got := mountOf(t, d, "pg-client"); got != mount {
		t.Fatalf("the Secret is mounted at %q, want %s as the values' comment says", got, mount)
	}
	// The Secret's files, where the pod would have them.
	dir := filepath.Dir(f.CAFile)
	extra := map[string]string{"SLUICE_DATABASE": strings.ReplaceAll(url, mount, dir)}
	a := startPodAdmin(t, buildAdmin(t), objs, d, extra)
	if v := currentVersion(t, a.url, chartAdminToken, a.out); v != 1 {
		t.Fatalf("the admin serves version %d, want the first version from the database", v)
	}
}

// mountOf returns where the container mounts the Secret secretName
// (read-only), or "".
func mountOf(t *testing.T, d *appsv1.Deployment, secretName string) string {
	t.Helper()
	pod := d.Spec.Template.Spec
	for _, v := range pod.Volumes {
		if v.Secret == nil || v.Secret.SecretName != secretName {
			continue
		}
		for _, m := range pod.Containers[0].VolumeMounts {
			if m.Name == v.Name && m.ReadOnly {
				return m.MountPath
			}
		}
	}
	return ""
}
