package migrate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// debianLayout is an nginx configuration split the way distributions
// split it: the zones in conf.d, the servers in sites-enabled, a map's
// entries in a file of their own, and standard includes the copy lacks.
var debianLayout = fstest.MapFS{
	"conf.d/zones.conf": {Data: []byte("limit_req_zone $limited_key zone=perkey:10m rate=5r/s;\nlimit_req_status 429;\n")},
	"conf.d/keys.conf":  {Data: []byte("map $http_x_api_key $limited_key {\n  default $http_x_api_key;\n  include /etc/nginx/partners.map;\n}\n")},
	"partners.map":      {Data: []byte("k-partner-1 \"\";\nk-partner-2 \"\";\n")},
	"sites-enabled/api": {Data: []byte("server {\n  server_name api.example.com;\n  location /v1/ { limit_req zone=perkey burst=10; }\n" +
		"  include snippets/health.conf;\n}\n")},
	"snippets/health.conf": {Data: []byte("location = /healthz { return 200; }\n")},
}

const debianMain = `user www-data;
include /etc/nginx/modules-enabled/*.conf;
events { worker_connections 768; }
http {
    include /etc/nginx/mime.types;
    include /etc/nginx/conf.d/*.conf;
    include /etc/nginx/sites-enabled/*;
}
`

// The same configuration in one file, as nginx reads the one above.
const debianInline = `user www-data;
events { worker_connections 768; }
http {
    map $http_x_api_key $limited_key {
      default $http_x_api_key;
      k-partner-1 "";
      k-partner-2 "";
    }
    limit_req_zone $limited_key zone=perkey:10m rate=5r/s;
    limit_req_status 429;
    server {
      server_name api.example.com;
      location /v1/ { limit_req zone=perkey burst=10; }
      location = /healthz { return 200; }
    }
}
`

// Included files are read where their include is, in nginx's order: the
// conversion of the split configuration is the conversion of the same
// configuration in one file.
func TestIncludedFilesConvertAsTheConfigurationInOneFile(t *testing.T) {
	split, err := Nginx([]byte(debianMain), NginxOptions{Files: debianLayout})
	if err != nil {
		t.Fatal(err)
	}
	inline, err := Nginx([]byte(debianInline), NginxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(split.Policy, inline.Policy) {
		t.Errorf("the split configuration converts to\n%s\nin one file to\n%s", split.Policy, inline.Policy)
	}
	if !strings.Contains(string(split.Policy), "k-partner-1") || !strings.Contains(string(split.Policy), "/v1/") {
		t.Errorf("the included map entries or location are missing:\n%s", split.Policy)
	}
	for _, n := range split.Notes {
		if strings.Contains(n, "include") {
			t.Errorf("a followed include is noted: %s", n)
		}
	}
}

// An error in an included file names the file and its line.
func TestAnErrorInAnIncludedFileNamesTheFile(t *testing.T) {
	files := fstest.MapFS{
		"conf.d/zones.conf": {Data: []byte("limit_req_zone $binary_remote_addr zone=ip:10m rate=1r/s;\n")},
		"sites/bad.conf":    {Data: []byte("server {\n  location / {\n    limit_req zone=nope;\n  }\n}\n")},
	}
	_, err := Nginx([]byte("http {\n include conf.d/*.conf;\n include sites/*.conf;\n}\n"), NginxOptions{Files: files})
	if err == nil || !strings.Contains(err.Error(), "sites/bad.conf: line 3: limit_req zone=nope") {
		t.Errorf("got %v, want the error at sites/bad.conf line 3", err)
	}
	files["sites/bad.conf"] = &fstest.MapFile{Data: []byte("server {\n  location / { limit_req zone=ip; }\n  location / { limit_req zone=ip; }\n}\n")}
	_, err = Nginx([]byte("http {\n include conf.d/*.conf;\n include sites/*.conf;\n}\n"), NginxOptions{Files: files})
	if err == nil || !strings.Contains(err.Error(), `sites/bad.conf: line 3: duplicate location "/" (also line 2 of sites/bad.conf)`) {
		t.Errorf("got %v, want both positions in sites/bad.conf", err)
	}
}

func TestIncludesThatCannotBeFollowedAreRefusedOrNoted(t *testing.T) {
	files := fstest.MapFS{
		"loop.conf":  {Data: []byte("include loop.conf;\n")},
		"zones.conf": {Data: []byte("limit_req_zone $binary_remote_addr zone=ip:10m rate=1r/s;\n")},
	}
	for _, c := range []struct{ conf, want string }{
		{"include loop.conf;\n", "nested more than 8 deep"},
		{"include missing.conf;\n", "include missing.conf: missing.conf is not in the configuration's directory"},
		{"include zones.conf;\ninclude [;\n", "include [: syntax error in pattern"},
	} {
		if _, err := Nginx([]byte(c.conf), NginxOptions{Files: files}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.conf, err, c.want)
		}
	}
	// Outside the directory: noted, the rest converted. A pattern that
	// matches nothing includes nothing, as in nginx.
	res, err := Nginx([]byte("include zones.conf;\ninclude /srv/other/*.conf;\ninclude ../up.conf;\ninclude none/*.conf;\nlocation / { limit_req zone=ip; }\n"), NginxOptions{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	notesContain(t, res.Notes, "include is not followed: /srv/other/*.conf (line 2), ../up.conf (line 3); it is outside the configuration's directory /etc/nginx (-conf-dir)")
	// Another -conf-dir: absolute names under it are read from the directory.
	if _, err := Nginx([]byte("include /opt/nginx/zones.conf;\nlocation / { limit_req zone=ip; }\n"), NginxOptions{Files: files, ConfDir: "/opt/nginx/"}); err != nil {
		t.Errorf("an include under -conf-dir /opt/nginx/: %v", err)
	}
}

// The command reads includes from the directory of the file it is given.
func TestTheNginxCommandFollowsIncludesFromTheFilesDirectory(t *testing.T) {
	dir := t.TempDir()
	for name, f := range debianLayout {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	main := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(main, []byte(debianMain), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"nginx", "-f", main}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	inline, err := Nginx([]byte(debianInline), NginxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), string(inline.Policy)) {
		t.Errorf("the command's policy differs from the configuration in one file:\n%s", stdout.String())
	}
}
