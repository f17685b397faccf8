package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sluice-rl/sluice/admin/envoygateway"
	"github.com/sluice-rl/sluice/admin/istio"
)

// fakeWasm is a valid module header and some bytes: the image code never
// runs the module.
var fakeWasm = append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Repeat([]byte("sluice"), 1000)...)

var testMeta = Meta{Version: "v0.0.0-test", Source: "https://github.com/sluice-rl/sluice", Licence: "Apache-2.0",
	Created: time.Unix(1700000000, 0)}

// compiled caches test compilations: the real admin for linux/amd64 (the
// test runs it) and a small stand-in for every other program and platform
// (cross-compiling the admin and gateway for arm64 takes minutes; make
// images does it).
var compiled sync.Map

func testCompile(ctx context.Context, pkg string, plat v1.Platform) ([]byte, error) {
	build := "./testdata/hello"
	if pkg == "./admin" && plat.Architecture == "amd64" {
		build = "github.com/sluice-rl/sluice/admin"
	}
	key := build + " " + plat.String()
	if b, ok := compiled.Load(key); ok {
		return b.([]byte), nil
	}
	if b, ok := prebuiltAdmin(build, plat); ok {
		return b, nil
	}
	b, err := GoBuild(ctx, build, plat)
	if err == nil {
		compiled.Store(key, b)
	}
	return b, err
}

// prebuiltAdmin returns bin/ratelimit-admin when make test's build made it
// (SLUICE_WASM_DIR names bin/) and it is the static linux/amd64 executable
// the image needs, sparing a second compilation of the admin.
func prebuiltAdmin(build string, plat v1.Platform) ([]byte, bool) {
	dir := os.Getenv("SLUICE_WASM_DIR")
	if dir == "" || build != "github.com/sluice-rl/sluice/admin" || plat.Architecture != runtime.GOARCH || runtime.GOOS != "linux" {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(dir, "ratelimit-admin"))
	if err != nil {
		return nil, false
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, false
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP { // dynamically linked: not what the image holds
			return nil, false
		}
	}
	return b, true
}

func buildAll(t *testing.T, out string) Summary {
	t.Helper()
	dir := t.TempDir()
	wasm := filepath.Join(dir, "ratelimit.wasm")
	os.WriteFile(wasm, fakeWasm, 0o644)
	pol := filepath.Join(dir, "policy.json")
	os.WriteFile(pol, []byte(`{"rules": []}`), 0o644)
	sum, err := Build(t.Context(), BuildOptions{Out: out, Wasm: wasm, Policy: pol, Meta: testMeta, Compile: testCompile})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func startRegistry(t *testing.T) string {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestImagesPushedAndPulledAsEachConsumerReadsThem builds every image,
// pushes it to an in-process registry, pulls it back and reads it the way
// its consumer does: Istio's and Envoy Gateway's Wasm fetchers, and a
// container runtime for the admin.
func TestImagesPushedAndPulledAsEachConsumerReadsThem(t *testing.T) {
	out := filepath.Join(t.TempDir(), "images")
	sum := buildAll(t, out)
	reg := startRegistry(t) + "/sluice"
	for _, n := range []string{WasmCompat, WasmOCI, Admin, Gateway} {
		refs, err := Push(t.Context(), filepath.Join(out, n), PushOptions{Registry: reg, Tags: []string{"latest"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) != 2 || !strings.HasSuffix(refs[0], ":"+testMeta.Version+"@"+sum.Images[n].Digest) {
			t.Fatalf("%s: pushed %v, want the version and latest at %s", n, refs, sum.Images[n].Digest)
		}
	}
	wantSHA := ModuleSHA256(fakeWasm)

	t.Run("wasm compat variant", func(t *testing.T) {
		img := pullImage(t, reg+"/"+WasmCompat+":latest")
		got, variant, err := fetchWasmLikeIstio(img)
		if err != nil || variant != "compat" || !bytes.Equal(got, fakeWasm) {
			t.Fatalf("Istio/Envoy Gateway fetch: variant %q, %d bytes, err %v; want compat with the module", variant, len(got), err)
		}
		m, _ := img.Manifest()
		if m.Annotations[VariantAnnotation] != "compat" || m.Annotations[ModuleSHA256Annotation] != wantSHA {
			t.Errorf("annotations %v: want %s=compat and the module's sha256", m.Annotations, VariantAnnotation)
		}
		checkLabels(t, m.Annotations, WasmCompat)
	})
	t.Run("wasm oci variant", func(t *testing.T) {
		img := pullImage(t, reg+"/"+WasmOCI+":"+testMeta.Version)
		got, variant, err := fetchWasmLikeIstio(img)
		if err != nil || variant != "oci" || !bytes.Equal(got, fakeWasm) {
			t.Fatalf("Istio/Envoy Gateway fetch: variant %q, %d bytes, err %v; want oci with the module", variant, len(got), err)
		}
		m, _ := img.Manifest()
		var layerDigest string
		for _, l := range m.Layers {
			if l.MediaType == WasmLayerType {
				layerDigest = l.Digest.Hex
			}
		}
		if layerDigest != wantSHA || sum.Images[WasmOCI].ModuleSHA256 != wantSHA {
			t.Errorf("wasm layer digest %s, summary %s; want the module's sha256 %s", layerDigest, sum.Images[WasmOCI].ModuleSHA256, wantSHA)
		}
	})
	t.Run("admin", func(t *testing.T) {
		idx := pullIndex(t, reg+"/"+Admin+":latest")
		im, _ := idx.IndexManifest()
		var plats []string
		for _, d := range im.Manifests {
			plats = append(plats, d.Platform.String())
		}
		if !slices.Equal(plats, []string{"linux/amd64", "linux/arm64"}) {
			t.Fatalf("platforms %v, want linux/amd64 and linux/arm64 in one index", plats)
		}
		img, err := idx.Image(im.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := img.ConfigFile()
		c := cf.Config
		if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/ratelimit-admin"}) {
			t.Errorf("user %q entrypoint %v; want 65532:65532 and /usr/local/bin/ratelimit-admin", c.User, c.Entrypoint)
		}
		for _, p := range []string{"9000/tcp", "18000/tcp", "18081/tcp"} {
			if _, ok := c.ExposedPorts[p]; !ok {
				t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
			}
		}
		if _, ok := c.Volumes["/data"]; !ok {
			t.Errorf("volumes %v: want /data", c.Volumes)
		}
		checkLabels(t, c.Labels, Admin)
		size := compressedSize(t, img)
		if size > 40<<20 {
			t.Errorf("admin image is %d bytes compressed, over 40 MB", size)
		}
		t.Logf("admin image linux/amd64: %.1f MB compressed", float64(size)/(1<<20))

		files := extract(t, img)
		if h := files["data"]; h == nil || h.hdr.Typeflag != tar.TypeDir || h.hdr.Uid != UID {
			t.Errorf("/data: %+v, want a directory owned by %d", h, UID)
		}
		if !strings.Contains(string(files["etc/passwd"].data), fmt.Sprintf(":%d:%d:", UID, UID)) {
			t.Errorf("/etc/passwd has no user %d", UID)
		}
		if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(files["etc/ssl/certs/ca-certificates.crt"].data) {
			t.Error("/etc/ssl/certs/ca-certificates.crt holds no certificates")
		}
		bin := filepath.Join(t.TempDir(), "ratelimit-admin")
		os.WriteFile(bin, files["usr/local/bin/ratelimit-admin"].data, 0o755)
		var stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), bin, "-h")
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || !strings.Contains(stderr.String(), "-data-dir") {
			t.Fatalf("the extracted admin with -h: %v, output %q", err, stderr.String())
		}
	})
	t.Run("gateway", func(t *testing.T) {
		idx := pullIndex(t, reg+"/"+Gateway+":"+testMeta.Version)
		im, _ := idx.IndexManifest()
		img, _ := idx.Image(im.Manifests[1].Digest)
		files := extract(t, img)
		if !bytes.Equal(files[strings.TrimPrefix(WasmPath, "/")].data, fakeWasm) {
			t.Errorf("the gateway image lacks the module at %s", WasmPath)
		}
		cf, _ := img.ConfigFile()
		if cf.Architecture != "arm64" || !slices.Contains(cf.Config.Env, "SLUICE_WASM="+WasmPath) {
			t.Errorf("arch %s env %v: want arm64 and SLUICE_WASM", cf.Architecture, cf.Config.Env)
		}
	})
}

// TestImagesBuildTwiceGivesTheSameDigests: make images is reproducible.
func TestImagesBuildTwiceGivesTheSameDigests(t *testing.T) {
	a := buildAll(t, filepath.Join(t.TempDir(), "a"))
	b := buildAll(t, filepath.Join(t.TempDir(), "b"))
	if len(a.Images) != 4 {
		t.Fatalf("built %d images, want 4", len(a.Images))
	}
	for n, im := range a.Images {
		if b.Images[n] != im {
			t.Errorf("%s: %v then %v", n, im, b.Images[n])
		}
	}
}

func TestPushFailsNamingTheRegistry(t *testing.T) {
	img, err := NewWasmOCI(fakeWasm, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), WasmOCI)
	if _, err := WriteLayout(dir, img, "v1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ registry, want string }{
		{"127.0.0.1:1/sluice", "127.0.0.1:1/sluice/ratelimit-wasm-oci:v1"},
		{"Not A Registry!", `registry: "Not A Registry!" is not host[:port][/prefix]`},
		{"", "registry: empty"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := Push(ctx, dir, PushOptions{Registry: tc.registry, Remote: []remote.Option{remote.WithRetryBackoff(remote.Backoff{Steps: 1})}})
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("push to %q: %v, want an error naming %q", tc.registry, err, tc.want)
		}
	}
	if _, err := Push(t.Context(), t.TempDir(), PushOptions{Registry: "127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "not an OCI image layout") {
		t.Errorf("push of an empty directory: %v", err)
	}
}

func TestBadInputsAreRefusedNamingTheField(t *testing.T) {
	if _, err := NewWasmCompat([]byte("not wasm"), testMeta); err == nil || !strings.Contains(err.Error(), "wasm:") {
		t.Errorf("not a module: %v", err)
	}
	if _, err := NewWasmOCI(fakeWasm, Meta{}); err == nil || !strings.Contains(err.Error(), "version:") || !strings.Contains(err.Error(), "licence:") {
		t.Errorf("empty meta: %v", err)
	}
	if _, err := NewProgram(Program{Name: Admin, Binaries: []Binary{{Platform: Platforms[0], Data: []byte("#!/bin/sh")}}}, testMeta); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("a script as binary: %v", err)
	}
}

func pullImage(t *testing.T, ref string) v1.Image {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	// As the fetchers do: remote.Get, then the descriptor's image.
	desc, err := remote.Get(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func pullIndex(t *testing.T, ref string) v1.ImageIndex {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// fetchWasmLikeIstio follows the Wasm image fetcher that Istio
// (pkg/wasm/imagefetcher.go) and Envoy Gateway (internal/wasm/
// imagefetcher.go, derived from it) share: a Docker manifest is refused
// here (we build OCI only); the compat variant is the LAST layer with the
// OCI tar+gzip media type, whose tar holds a file named plugin.wasm
// (matched by base name); otherwise the oci variant needs exactly two
// layers, one of type application/vnd.module.wasm.content.layer.v1+wasm,
// read as stored (not decompressed).
func fetchWasmLikeIstio(img v1.Image) ([]byte, string, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, "", err
	}
	if m.MediaType == types.DockerManifestSchema2 {
		return nil, "", errors.New("docker manifest")
	}
	layers, err := img.Layers()
	if err != nil || len(layers) == 0 {
		return nil, "", fmt.Errorf("layers: %v (%d)", err, len(layers))
	}
	last := layers[len(layers)-1]
	if mt, _ := last.MediaType(); mt == types.OCILayer {
		rc, err := last.Compressed()
		if err != nil {
			return nil, "", err
		}
		defer rc.Close()
		gr, err := gzip.NewReader(rc)
		if err != nil {
			return nil, "", err
		}
		tr := tar.NewReader(gr)
		for {
			h, err := tr.Next()
			if err != nil {
				return nil, "", fmt.Errorf("plugin.wasm not found: %v", err)
			}
			if path.Base(h.Name) == PluginFile {
				b, err := io.ReadAll(tr)
				return b, "compat", err
			}
		}
	}
	if len(layers) != 2 {
		return nil, "", fmt.Errorf("oci variant needs 2 layers, got %d", len(layers))
	}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt == WasmLayerType {
			rc, err := l.Compressed()
			if err != nil {
				return nil, "", err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			return b, "oci", err
		}
	}
	return nil, "", errors.New("no wasm layer")
}

func checkLabels(t *testing.T, labels map[string]string, title string) {
	t.Helper()
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  testMeta.Version,
		"org.opencontainers.image.source":   testMeta.Source,
		"org.opencontainers.image.licenses": testMeta.Licence,
		"org.opencontainers.image.title":    title,
	} {
		if labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, labels[k], want)
		}
	}
}

func compressedSize(t *testing.T, img v1.Image) int64 {
	layers, _ := img.Layers()
	var n int64
	for _, l := range layers {
		s, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		n += s
	}
	return n
}

type extracted struct {
	hdr  *tar.Header
	data []byte
}

func extract(t *testing.T, img v1.Image) map[string]*extracted {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := map[string]*extracted{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[strings.TrimSuffix(h.Name, "/")] = &extracted{hdr: h, data: b}
	}
}

// TestIstioAndEnvoyGatewayExportsNameTheWasmImage: the exports' default
// module is the compat image make images builds, as pushed with make push.
func TestIstioAndEnvoyGatewayExportsNameTheWasmImage(t *testing.T) {
	want := "ghcr.io/sluice-rl/" + WasmCompat + ":latest"
	for name, got := range map[string]string{"istio.DefaultURL": istio.DefaultURL, "envoygateway.DefaultImage": envoygateway.DefaultImage} {
		if strings.TrimPrefix(got, "oci://") != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
}
