package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Platforms the image is built for.
var Platforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// User is the image's user and group: distroless's "nonroot".
const User = "65532:65532"

// Source is the repository the labels name.
const Source = "https://github.com/mcsd-io/mcsd"

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: image build [-out DIR] [-tag NAME:TAG] | push -image REGISTRY/NAME:TAG [-out DIR]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	out := fs.String("out", "_output", "output folder")
	tag := fs.String("tag", "mcsd:dev", "build: the tag of the Docker archive")
	image := fs.String("image", "", "push: where to push the index")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "build":
		meta, err := commitMeta(ctx)
		if err != nil {
			return err
		}
		idx, err := Build(ctx, Options{Meta: meta, Binary: goBuild})
		if err != nil {
			return err
		}
		return Write(idx, *out, *tag)
	case "push":
		if *image == "" {
			return errors.New("push: -image REGISTRY/NAME:TAG is required")
		}
		p, err := layout.FromPath(filepath.Join(*out, "image"))
		if err != nil {
			return fmt.Errorf("read %s (run make image first): %w", filepath.Join(*out, "image"), err)
		}
		idx, err := p.ImageIndex()
		if err != nil {
			return err
		}
		return Push(ctx, idx, *image, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	}
	return fmt.Errorf("unknown command %q: build or push", args[0])
}

// Meta is what the labels and times of the image say.
type Meta struct {
	Revision string    // the commit
	Version  string    // git describe
	Created  time.Time // the commit's time
}

// commitMeta reads the commit the tree is at.
func commitMeta(ctx context.Context) (Meta, error) {
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", args...).Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil {
		return Meta{}, fmt.Errorf("git rev-parse: %w", err)
	}
	ts, err := git("show", "-s", "--format=%ct", "HEAD")
	if err != nil {
		return Meta{}, fmt.Errorf("git show: %w", err)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Meta{}, fmt.Errorf("commit time %q: %w", ts, err)
	}
	version, err := git("describe", "--tags", "--always", "--dirty")
	if err != nil {
		version = rev
	}
	return Meta{Revision: rev, Version: version, Created: time.Unix(secs, 0).UTC()}, nil
}

// goBuild builds the static mcsd binary for platform p and returns it.
func goBuild(ctx context.Context, p v1.Platform) ([]byte, error) {
	dir, err := os.MkdirTemp("", "mcsd-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "mcsd")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid=", "-o", bin, "./cmd/mcsd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build mcsd for %s/%s: %w", p.OS, p.Architecture, err)
	}
	return os.ReadFile(bin)
}

// Options say what Build builds.
type Options struct {
	Meta Meta
	// Binary returns the mcsd binary for a platform.
	Binary func(context.Context, v1.Platform) ([]byte, error)
	// Platforms default to Platforms.
	Platforms []v1.Platform
}

// Build makes the image index: one image per platform.
func Build(ctx context.Context, o Options) (v1.ImageIndex, error) {
	if o.Platforms == nil {
		o.Platforms = Platforms
	}
	labels := map[string]string{
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.revision":    o.Meta.Revision,
		"org.opencontainers.image.version":     o.Meta.Version,
		"org.opencontainers.image.created":     o.Meta.Created.Format(time.RFC3339),
		"org.opencontainers.image.title":       "mcsd",
		"org.opencontainers.image.description": "Multi-cluster service discovery for Kubernetes (KEP-1645)",
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	for _, p := range o.Platforms {
		bin, err := o.Binary(ctx, p)
		if err != nil {
			return nil, err
		}
		img, err := platformImage(p, bin, labels, o.Meta.Created)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx, nil
}

// platformImage is the image of one platform: one layer holding /mcsd and
// the nonroot user's /etc/passwd and /etc/group entries.
func platformImage(p v1.Platform, bin []byte, labels map[string]string, created time.Time) (v1.Image, error) {
	layerTar, err := rootfs(bin, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "hack/image", Comment: "mcsd"}})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = []string{"/mcsd"}
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/"}
	cf.Config.Labels = labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return mutate.CreatedAt(img, v1.Time{Time: created})
}

// rootfs is the layer's tar: /mcsd (0755), /etc/passwd and /etc/group with
// root and nonroot, and /tmp; every entry owned by root but /tmp, every
// time the commit's.
func rootfs(bin []byte, created time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, data []byte) error {
		h.ModTime, h.AccessTime, h.ChangeTime = created, time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\n"
	for _, e := range []struct {
		h    tar.Header
		data []byte
	}{
		{tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, nil},
		{tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(group))}, []byte(group)},
		{tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(passwd))}, []byte(passwd)},
		{tar.Header{Name: "home/", Typeflag: tar.TypeDir, Mode: 0o755}, nil},
		{tar.Header{Name: "home/nonroot/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: 65532, Gid: 65532}, nil},
		{tar.Header{Name: "mcsd", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}, bin},
		{tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, nil},
	} {
		if err := add(&e.h, e.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes the index as an OCI layout in out/image, an OCI archive of
// that layout, and a Docker archive of the host platform's image tagged
// tag.
func Write(idx v1.ImageIndex, out, tag string) error {
	dir := filepath.Join(out, "image")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	archive := filepath.Join(out, "mcsd-image.oci.tar")
	if err := tarDir(dir, archive); err != nil {
		return err
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("tag %q: %w", tag, err)
	}
	img, err := PlatformImage(idx, v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		return err
	}
	docker := filepath.Join(out, "mcsd-image-"+runtime.GOARCH+".docker.tar")
	if err := tarball.WriteToFile(docker, ref, img); err != nil {
		return fmt.Errorf("write Docker archive: %w", err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image index %s\n  OCI layout:     %s\n  OCI archive:    %s\n  Docker archive: %s (%s, linux/%s)\n", d, dir, archive, docker, tag, runtime.GOARCH)
	return printPlatforms(idx)
}

// PlatformImage returns the image of platform p in idx.
func PlatformImage(idx v1.ImageIndex, p v1.Platform) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS == p.OS && d.Platform.Architecture == p.Architecture {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s/%s in the index", p.OS, p.Architecture)
}

// tarDir writes dir's files into a tar at path, in name order, with fixed
// times: the OCI archive of a layout.
func tarDir(dir, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.ModTime, h.Uname, h.Gname, h.Uid, h.Gid = filepath.ToSlash(rel), time.Unix(0, 0), "", "", 0, 0
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	return errors.Join(err, tw.Close(), f.Close())
}

// Push pushes the index to image (REGISTRY/NAME:TAG).
func Push(ctx context.Context, idx v1.ImageIndex, image string, opts ...remote.Option) error {
	ref, err := name.ParseReference(image)
	if err != nil {
		return fmt.Errorf("image %q: %w", image, err)
	}
	if err := remote.WriteIndex(ref, idx, append(opts, remote.WithContext(ctx))...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("pushed %s@%s\n", ref, d)
	return printPlatforms(idx)
}

// printPlatforms prints each platform's image digest, as a release note
// lists them.
func printPlatforms(idx v1.ImageIndex) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range m.Manifests {
		if desc.Platform != nil {
			fmt.Printf("  %s/%s %s\n", desc.Platform.OS, desc.Platform.Architecture, desc.Digest)
		}
	}
	return nil
}
