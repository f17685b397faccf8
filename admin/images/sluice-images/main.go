// Command sluice-images builds Sluice's OCI images without a container
// engine (make images) and pushes them (make push):
//
//	sluice-images build -out bin/images -wasm bin/ratelimit.wasm -version v1.2.0 -created 1700000000
//	sluice-images push -in bin/images -registry registry.example.com:5000/sluice [-tag latest]
//
// See docs/kubernetes.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/images"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: sluice-images build|push [flags]")
	}
	fs := flag.NewFlagSet("sluice-images "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	switch args[0] {
	case "build":
		var o images.BuildOptions
		var created int64
		fs.StringVar(&o.Out, "out", "bin/images", "output directory: one OCI image layout per image")
		fs.StringVar(&o.Wasm, "wasm", "bin/ratelimit.wasm", "the filter module")
		fs.StringVar(&o.Policy, "policy", "plugin/gateway/demo-config.json", "the gateway image's default policy")
		fs.StringVar(&o.Meta.Version, "version", "dev", "image version label and tag (make images: git describe)")
		fs.StringVar(&o.Meta.Source, "source", "https://github.com/sluice-rl/sluice", "source repository label")
		fs.StringVar(&o.Meta.Licence, "licence", "Apache-2.0", "licence label (SPDX)")
		fs.Int64Var(&created, "created", 0, "creation time, Unix seconds (make images: the commit's time)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		o.Meta.Created = time.Unix(created, 0)
		sum, err := images.Build(ctx, o)
		if err != nil {
			return err
		}
		for _, n := range []string{images.WasmCompat, images.WasmOCI, images.Admin, images.Gateway} {
			im := sum.Images[n]
			fmt.Fprintf(stdout, "%s/%s  %s:%s  %s\n", o.Out, n, n, sum.Version, im.Digest)
		}
		fmt.Fprintf(stdout, "module sha256 %s\n", sum.Images[images.WasmOCI].ModuleSHA256)
		return nil
	case "push":
		var o images.PushOptions
		var in, tags string
		fs.StringVar(&in, "in", "bin/images", "directory written by build")
		fs.StringVar(&o.Registry, "registry", "", "host[:port][/prefix] to push to")
		fs.StringVar(&tags, "tag", "", "further tags, comma-separated (e.g. latest)")
		fs.BoolVar(&o.Insecure, "insecure", false, "plain HTTP to the registry")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if tags != "" {
			o.Tags = strings.Split(tags, ",")
		}
		for _, n := range []string{images.WasmCompat, images.WasmOCI, images.Admin, images.Gateway} {
			refs, err := images.Push(ctx, filepath.Join(in, n), o)
			if err != nil {
				return err
			}
			for _, r := range refs {
				fmt.Fprintln(stdout, "pushed", r)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown command %q: use build or push", args[0])
}
