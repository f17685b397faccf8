package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RefNameAnnotation names an entry of an OCI layout's index.json (its tag).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout replaces dir with an OCI image layout holding one entry, an
// image or an index, tagged version.
func WriteLayout(dir string, entry mutate.Appendable, version string) (v1.Hash, error) {
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", dir, err)
	}
	opt := layout.WithAnnotations(map[string]string{RefNameAnnotation: version})
	switch e := entry.(type) {
	case v1.ImageIndex:
		err = p.AppendIndex(e, opt)
	case v1.Image:
		err = p.AppendImage(e, opt)
	default:
		err = fmt.Errorf("%T is neither an image nor an index", entry)
	}
	if err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", dir, err)
	}
	return digestOf(entry)
}

func digestOf(entry mutate.Appendable) (v1.Hash, error) {
	if d, ok := entry.(interface{ Digest() (v1.Hash, error) }); ok {
		return d.Digest()
	}
	return v1.Hash{}, fmt.Errorf("%T has no digest", entry)
}

// Entry is the one image or index of a layout written by WriteLayout.
type Entry struct {
	Descriptor v1.Descriptor
	Image      v1.Image      // set for an image
	Index      v1.ImageIndex // set for an index
	Tag        string
}

// ReadLayout reads the entry of a layout written by WriteLayout.
func ReadLayout(dir string) (Entry, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return Entry{}, fmt.Errorf("%s: not an OCI image layout (run make images): %w", dir, err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return Entry{}, fmt.Errorf("%s: %w", dir, err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return Entry{}, fmt.Errorf("%s: %w", dir, err)
	}
	if len(im.Manifests) != 1 {
		return Entry{}, fmt.Errorf("%s: index.json has %d entries, want 1", dir, len(im.Manifests))
	}
	e := Entry{Descriptor: im.Manifests[0], Tag: im.Manifests[0].Annotations[RefNameAnnotation]}
	switch e.Descriptor.MediaType {
	case types.OCIImageIndex, types.DockerManifestList:
		e.Index, err = ii.ImageIndex(e.Descriptor.Digest)
	default:
		e.Image, err = ii.Image(e.Descriptor.Digest)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("%s: %w", dir, err)
	}
	return e, nil
}

// PushOptions say where layouts go.
type PushOptions struct {
	// Registry is host[:port][/prefix]: the image NAME goes to
	// Registry/NAME:<tag>.
	Registry string
	// Tags added to the layout's own tag (its version), e.g. "latest".
	Tags []string
	// Insecure talks plain HTTP to the registry (localhost and 127.0.0.1
	// always do).
	Insecure bool
	Remote   []remote.Option
}

// Repository returns the repository of image NAME under registry, or an
// error naming the registry when it is not a valid reference.
func Repository(registry, image string, insecure bool) (name.Repository, error) {
	reg := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(registry, "oci://"), "//"), "/")
	if reg == "" {
		return name.Repository{}, errors.New("registry: empty; give host:port[/prefix] (REGISTRY=...)")
	}
	var opts []name.Option
	opts = append(opts, name.StrictValidation)
	if insecure {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(reg+"/"+image, opts...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("registry: %q is not host[:port][/prefix]: %w", registry, err)
	}
	return repo, nil
}

// Push pushes the layout in dir (image NAME = the directory's base name)
// under each tag and returns the references pushed.
func Push(ctx context.Context, dir string, o PushOptions) ([]string, error) {
	image := filepath.Base(dir)
	repo, err := Repository(o.Registry, image, o.Insecure)
	if err != nil {
		return nil, err
	}
	e, err := ReadLayout(dir)
	if err != nil {
		return nil, err
	}
	tags := append([]string{e.Tag}, o.Tags...)
	opts := append([]remote.Option{remote.WithContext(ctx)}, o.Remote...)
	var pushed []string
	for _, tag := range tags {
		if tag == "" {
			continue
		}
		ref := repo.Tag(tag)
		if e.Index != nil {
			err = remote.WriteIndex(ref, e.Index, opts...)
		} else {
			err = remote.Write(ref, e.Image, opts...)
		}
		if err != nil {
			return pushed, fmt.Errorf("pushing %s to %s: %w", image, ref, err)
		}
		pushed = append(pushed, ref.String()+"@"+e.Descriptor.Digest.String())
	}
	return pushed, nil
}

// Summary is bin/images/images.json: what make images built.
type Summary struct {
	Version string                  `json:"version"`
	Images  map[string]SummaryImage `json:"images"`
}

// SummaryImage is one image of the summary.
type SummaryImage struct {
	Digest       string `json:"digest"`                  // manifest or index digest: Istio's and Envoy Gateway's image sha256
	ModuleSHA256 string `json:"module_sha256,omitempty"` // the Wasm images: sha256 of the module (an HTTP source's sha256)
}

// WriteSummary writes s as JSON into dir/images.json.
func WriteSummary(dir string, s Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "images.json"), append(b, '\n'), 0o644)
}
