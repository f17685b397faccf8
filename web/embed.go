// Package web is the admin dashboard: templ components (server-rendered
// HTML) and the static CSS and JavaScript they use, embedded in the admin
// binary. It holds no logic: admin/httpapi fills in the view structs of
// views.go and renders the components.
//
// The pages work without JavaScript; app.js only adds conveniences
// (jumping to an error's line, copying the manifest, refreshing the nodes)
// and dashboard.js swaps the dashboard's server-rendered live fragments in
// as they arrive (server-sent events, else polling).
// Nothing inline: the admin's Content-Security-Policy allows scripts and
// styles from /static only.
//
// After editing a .templ file, regenerate its _templ.go (committed next to
// it) with `go generate ./web`.
package web

//go:generate go tool templ generate

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
)

//go:embed static
var static embed.FS

// Static returns the static assets (app.css, app.js, ...), served under
// /static/.
func Static() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil { // unreachable: the directory is embedded
		return static
	}
	return sub
}

// assetHashes maps each asset to a short hash of its contents, so pages
// reference /static/app.css?v=<hash> and browsers never use a stale copy.
var assetHashes = func() map[string]string {
	out := map[string]string{}
	fs.WalkDir(Static(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := fs.ReadFile(Static(), p)
		if err != nil {
			return nil
		}
		sum := sha256.Sum256(b)
		out[p] = hex.EncodeToString(sum[:6])
		return nil
	})
	return out
}()

// AssetHash returns the content hash of an asset ("" if there is none).
func AssetHash(name string) string { return assetHashes[name] }

// asset returns the URL of a static asset, with its content hash.
func asset(name string) string {
	return path.Join("/static", name) + "?v=" + assetHashes[name]
}
