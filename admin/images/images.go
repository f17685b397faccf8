// Package images builds Sluice's OCI images without a container engine:
// the filter as a Wasm image (in the two layouts Istio and Envoy Gateway
// pull) and the admin and gateway programs as images from scratch, one
// index for linux/amd64 and linux/arm64. It writes OCI image layouts
// (one directory per image) and pushes them to a registry.
//
// Every input is fixed (file times, owners, creation time, gzip level), so
// building twice from the same files gives the same digests.
package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Image names: the directories under the output and the repositories
// pushed to.
const (
	WasmCompat = "ratelimit-wasm"     // compat variant: one tar+gzip layer holding plugin.wasm
	WasmOCI    = "ratelimit-wasm-oci" // oci variant: runtime config + raw module layers
	Admin      = "ratelimit-admin"
	Gateway    = "ratelimit-gateway"
)

// Media types and annotations of the Wasm images.
const (
	// WasmLayerType is the oci variant's layer: the module itself, not compressed.
	WasmLayerType types.MediaType = "application/vnd.module.wasm.content.layer.v1+wasm"
	// WasmRuntimeConfigType is the oci variant's runtime configuration layer.
	WasmRuntimeConfigType types.MediaType = "application/vnd.module.wasm.config.v1+json"
	// VariantAnnotation marks a compat image whose layer has the OCI media type.
	VariantAnnotation = "module.wasm.image/variant"
	// ModuleSHA256Annotation records the sha256 of the module in both variants.
	ModuleSHA256Annotation = "dev.sluice.wasm.sha256"
	// PluginFile is the module's name inside the compat layer.
	PluginFile = "plugin.wasm"
	// RootID is the filter's root context name (Envoy's root_id).
	RootID = "sluice"
)

// The non-root user of the program images; /data belongs to it.
const (
	UID      = 65532
	DataDir  = "/data"
	BinDir   = "/usr/local/bin"
	WasmPath = "/usr/local/lib/sluice/ratelimit.wasm"
)

// Meta is what every image is labelled with.
type Meta struct {
	Version string    // org.opencontainers.image.version, and the tag pushed
	Source  string    // org.opencontainers.image.source
	Licence string    // org.opencontainers.image.licenses (SPDX)
	Created time.Time // creation time and every file's time (the commit's time keeps builds reproducible)
}

func (m Meta) check() error {
	var errs []error
	if m.Version == "" || strings.ContainsAny(m.Version, " \t\n") {
		errs = append(errs, fmt.Errorf("version: %q must be a non-empty word (e.g. from git describe)", m.Version))
	}
	if m.Source == "" {
		errs = append(errs, errors.New("source: empty; give the repository URL"))
	}
	if m.Licence == "" {
		errs = append(errs, errors.New("licence: empty; give an SPDX identifier"))
	}
	return errors.Join(errs...)
}

// Labels are the OCI annotations and config labels of an image.
func (m Meta) Labels(title string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    title,
		"org.opencontainers.image.version":  m.Version,
		"org.opencontainers.image.source":   m.Source,
		"org.opencontainers.image.licenses": m.Licence,
		"org.opencontainers.image.created":  m.Created.UTC().Format(time.RFC3339),
	}
}

// ModuleSHA256 is the hex sha256 of a module, as Envoy Gateway's and
// Istio's sha256 fields for an HTTP source take it.
func ModuleSHA256(wasm []byte) string {
	s := sha256.Sum256(wasm)
	return hex.EncodeToString(s[:])
}

func checkWasm(wasm []byte) error {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return errors.New("wasm: not a WebAssembly module (no \\0asm header); build it with make wasm")
	}
	return nil
}

// NewWasmCompat builds the compat variant: one application/vnd.oci.image.
// layer.v1.tar+gzip layer whose tar holds plugin.wasm, and the manifest
// annotation module.wasm.image/variant=compat. Istio and Envoy Gateway
// read the last layer's plugin.wasm.
func NewWasmCompat(wasm []byte, m Meta) (v1.Image, error) {
	if err := errors.Join(checkWasm(wasm), m.check()); err != nil {
		return nil, err
	}
	tb, err := tarFiles(m.Created, []file{{name: PluginFile, mode: 0o444, data: wasm}})
	if err != nil {
		return nil, err
	}
	layer, err := gzipLayer(tb)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(ociBase(), mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		Annotations: map[string]string{"org.opencontainers.image.title": PluginFile}})
	if err != nil {
		return nil, err
	}
	img, err = withConfig(img, m, v1.Config{Labels: m.Labels(WasmCompat)}, v1.Platform{OS: "wasip1", Architecture: "wasm"})
	if err != nil {
		return nil, err
	}
	anns := m.Labels(WasmCompat)
	anns[VariantAnnotation] = "compat"
	anns[ModuleSHA256Annotation] = ModuleSHA256(wasm)
	return mutate.Annotations(img, anns).(v1.Image), nil
}

// NewWasmOCI builds the oci variant: two layers, the runtime
// configuration (application/vnd.module.wasm.config.v1+json) and the
// module itself, uncompressed (application/vnd.module.wasm.content.
// layer.v1+wasm), so that layer's digest is the module's sha256.
func NewWasmOCI(wasm []byte, m Meta) (v1.Image, error) {
	if err := errors.Join(checkWasm(wasm), m.check()); err != nil {
		return nil, err
	}
	rc, _ := json.Marshal(map[string]any{"type": "envoy_proxy", "abiVersions": []string{"proxy_abi_version_0_2_0"},
		"config": map[string]any{"root_ids": []string{RootID}}})
	img, err := mutate.Append(ociBase(),
		mutate.Addendum{Layer: static.NewLayer(rc, WasmRuntimeConfigType), Annotations: map[string]string{"org.opencontainers.image.title": "runtime-config.json"}},
		mutate.Addendum{Layer: static.NewLayer(wasm, WasmLayerType), Annotations: map[string]string{"org.opencontainers.image.title": "filter.wasm"}},
	)
	if err != nil {
		return nil, err
	}
	img, err = withConfig(img, m, v1.Config{Labels: m.Labels(WasmOCI)}, v1.Platform{OS: "wasip1", Architecture: "wasm"})
	if err != nil {
		return nil, err
	}
	anns := m.Labels(WasmOCI)
	anns[ModuleSHA256Annotation] = ModuleSHA256(wasm)
	return mutate.Annotations(img, anns).(v1.Image), nil
}

// Binary is one platform's static executable of a program.
type Binary struct {
	Platform v1.Platform // linux/amd64, linux/arm64
	Data     []byte
}

// Program describes a program image.
type Program struct {
	Name     string            // Admin or Gateway: the image and the executable's name
	Binaries []Binary          // one per platform, all in one index
	Ports    []string          // exposed, e.g. "9000/tcp"
	Env      []string          // NAME=value defaults for a container
	Extra    map[string][]byte // further read-only files by absolute path (e.g. the gateway's module)
}

// Platforms the program images are built for.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// NewProgram builds a program image from scratch for each binary's
// platform and returns them in one index: the executable in
// /usr/local/bin, a non-root user (65532) that owns /data (a volume,
// the working directory), /etc/passwd and /etc/group, Mozilla's CA
// certificates in /etc/ssl/certs/ca-certificates.crt, and /tmp.
func NewProgram(p Program, m Meta) (v1.ImageIndex, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if p.Name == "" || strings.ContainsAny(p.Name, "/ ") {
		return nil, fmt.Errorf("name: %q is not a program name", p.Name)
	}
	if len(p.Binaries) == 0 {
		return nil, fmt.Errorf("%s: no binaries", p.Name)
	}
	ports := map[string]struct{}{}
	for _, port := range p.Ports {
		ports[port] = struct{}{}
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range p.Binaries {
		if len(b.Data) < 4 || !bytes.Equal(b.Data[:4], []byte("\x7fELF")) {
			return nil, fmt.Errorf("%s %s: not an ELF executable (build it with GOOS=linux CGO_ENABLED=0)", p.Name, b.Platform)
		}
		files := baseFiles()
		files = append(files, file{name: path.Join(BinDir, p.Name), mode: 0o555, data: b.Data})
		for _, name := range slices.Sorted(maps.Keys(p.Extra)) {
			files = append(files, file{name: name, mode: 0o444, data: p.Extra[name]})
		}
		tb, err := tarFiles(m.Created, files)
		if err != nil {
			return nil, err
		}
		layer, err := gzipLayer(tb)
		if err != nil {
			return nil, err
		}
		img, err := mutate.Append(ociBase(), mutate.Addendum{Layer: layer, MediaType: types.OCILayer})
		if err != nil {
			return nil, err
		}
		cfg := v1.Config{
			User:         fmt.Sprintf("%d:%d", UID, UID),
			Entrypoint:   []string{path.Join(BinDir, p.Name)},
			Env:          append([]string{"PATH=" + BinDir, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}, p.Env...),
			ExposedPorts: ports,
			Volumes:      map[string]struct{}{DataDir: {}},
			WorkingDir:   DataDir,
			Labels:       m.Labels(p.Name),
		}
		if img, err = withConfig(img, m, cfg, b.Platform); err != nil {
			return nil, err
		}
		img = mutate.Annotations(img, m.Labels(p.Name)).(v1.Image)
		plat := b.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &plat}})
	}
	return mutate.Annotations(idx, m.Labels(p.Name)).(v1.ImageIndex), nil
}

func ociBase() v1.Image {
	return mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
}

// withConfig sets the config file: platform, creation time and cfg; the
// layers' history entries are dated too.
func withConfig(img v1.Image, m Meta, cfg v1.Config, plat v1.Platform) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = v1.Time{Time: m.Created.UTC()}
	cf.Config = cfg
	for i := range cf.History {
		cf.History[i].Created = cf.Created
	}
	return mutate.ConfigFile(img, cf)
}

type file struct {
	name string // absolute or relative path; directories end in "/"
	mode int64
	uid  int
	data []byte
}

func baseFiles() []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nsluice:x:%d:%d:sluice:%s:/sbin/nologin\n", UID, UID, DataDir)
	group := fmt.Sprintf("root:x:0:\nsluice:x:%d:\n", UID)
	return []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o444, data: []byte(passwd)},
		{name: "etc/group", mode: 0o444, data: []byte(group)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o444, data: caBundle()},
		{name: "tmp/", mode: 0o1777},
		{name: "data/", mode: 0o700, uid: UID},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: "usr/local/lib/", mode: 0o755},
		{name: "usr/local/lib/sluice/", mode: 0o755},
	}
}

// caBundle is Mozilla's root store as shipped in golang.org/x/crypto's
// fallback bundle (pinned in go.mod, so builds are reproducible), as PEM.
// Roots with constraints that X.509 cannot express are left out, as
// Debian's ca-certificates does.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// tarFiles writes a tar with fixed owners and times; directories are
// created for every path.
func tarFiles(mtime time.Time, files []file) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		name := strings.TrimPrefix(f.name, "/")
		h := &tar.Header{Name: name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: mtime.UTC(), Format: tar.FormatPAX}
		if strings.HasSuffix(name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func gzipLayer(tarBytes []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
