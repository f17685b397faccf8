package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// BuildOptions say what make images builds.
type BuildOptions struct {
	Out       string // output directory: one OCI layout per image, and images.json
	Wasm      string // the module (bin/ratelimit.wasm)
	Policy    string // the gateway image's default policy file
	Meta      Meta
	Platforms []v1.Platform // default Platforms
	// Compile builds a Go main package for a platform (default GoBuild).
	Compile func(ctx context.Context, pkg string, plat v1.Platform) ([]byte, error)
}

// Program packages and their container defaults.
var programs = []struct {
	name, pkg string
	ports     []string
	env       []string
}{
	{Admin, "./admin", []string{"9000/tcp", "18000/tcp", "18081/tcp"}, []string{
		"SLUICE_DATA_DIR=" + DataDir, "SLUICE_ADMIN_LISTEN=0.0.0.0:9000", "SLUICE_XDS_LISTEN=0.0.0.0:18000"}},
	{Gateway, "./plugin/gateway", []string{"8080/tcp"}, []string{
		"SLUICE_LISTEN=0.0.0.0:8080", "SLUICE_WASM=" + WasmPath, "SLUICE_CONFIG=/etc/sluice/policy.json"}},
}

// Build writes every image's layout under o.Out and returns the summary
// (also written to images.json).
func Build(ctx context.Context, o BuildOptions) (Summary, error) {
	if o.Compile == nil {
		o.Compile = GoBuild
	}
	if len(o.Platforms) == 0 {
		o.Platforms = Platforms
	}
	wasm, err := os.ReadFile(o.Wasm)
	if err != nil {
		return Summary{}, fmt.Errorf("wasm: %w (build it with make wasm)", err)
	}
	pol, err := os.ReadFile(o.Policy)
	if err != nil {
		return Summary{}, fmt.Errorf("policy: %w", err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return Summary{}, err
	}
	sum := Summary{Version: o.Meta.Version, Images: map[string]SummaryImage{}}
	write := func(name string, entry mutate.Appendable, module string) error {
		d, err := WriteLayout(filepath.Join(o.Out, name), entry, o.Meta.Version)
		if err != nil {
			return err
		}
		sum.Images[name] = SummaryImage{Digest: d.String(), ModuleSHA256: module}
		return nil
	}
	compat, err := NewWasmCompat(wasm, o.Meta)
	if err != nil {
		return sum, err
	}
	if err := write(WasmCompat, compat, ModuleSHA256(wasm)); err != nil {
		return sum, err
	}
	oci, err := NewWasmOCI(wasm, o.Meta)
	if err != nil {
		return sum, err
	}
	if err := write(WasmOCI, oci, ModuleSHA256(wasm)); err != nil {
		return sum, err
	}
	for _, p := range programs {
		prog := Program{Name: p.name, Ports: p.ports, Env: p.env}
		if p.name == Gateway {
			prog.Extra = map[string][]byte{WasmPath: wasm, "/etc/sluice/policy.json": pol}
		}
		for _, plat := range o.Platforms {
			bin, err := o.Compile(ctx, p.pkg, plat)
			if err != nil {
				return sum, err
			}
			prog.Binaries = append(prog.Binaries, Binary{Platform: plat, Data: bin})
		}
		idx, err := NewProgram(prog, o.Meta)
		if err != nil {
			return sum, err
		}
		if err := write(p.name, idx, ""); err != nil {
			return sum, err
		}
	}
	return sum, WriteSummary(o.Out, sum)
}

// GoBuild compiles a main package as a static, reproducible executable
// (CGO_ENABLED=0, -trimpath, no build id) for plat.
func GoBuild(ctx context.Context, pkg string, plat v1.Platform) ([]byte, error) {
	dir, err := os.MkdirTemp("", "sluice-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+plat.OS, "GOARCH="+plat.Architecture)
	if plat.Variant != "" && plat.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+plat.Variant[1:])
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s for %s: %w\n%s", pkg, plat, err, stderr.String())
	}
	return os.ReadFile(out)
}
