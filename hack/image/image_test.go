package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var meta = Meta{Revision: "0123456789abcdef", Version: "v0.1.0-3-g0123456", Created: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}

func fakeBinary(_ context.Context, p v1.Platform) ([]byte, error) {
	return []byte("mcsd for " + p.Architecture), nil
}

// files lists the image's files: path → mode, and the content of /mcsd.
func files(t *testing.T, img v1.Image) (map[string]int64, []byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	var bin []byte
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = h.Mode
			if h.Name == "mcsd" {
				if bin, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		_ = rc.Close()
	}
	return out, bin
}

func TestImage(t *testing.T) {
	idx, err := Build(context.Background(), Options{Meta: meta, Binary: fakeBinary})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the same commit gives the same digest", func(t *testing.T) {
		again, err := Build(context.Background(), Options{Meta: meta, Binary: fakeBinary})
		if err != nil {
			t.Fatal(err)
		}
		d1, _ := idx.Digest()
		d2, _ := again.Digest()
		if d1 != d2 {
			t.Errorf("two builds of one commit: %s and %s", d1, d2)
		}
		other := meta
		other.Revision = "fedcba9876543210"
		o, err := Build(context.Background(), Options{Meta: other, Binary: fakeBinary})
		if err != nil {
			t.Fatal(err)
		}
		if d3, _ := o.Digest(); d3 == d1 {
			t.Error("another commit gives the same digest")
		}
	})
	t.Run("every platform: static entry point, non-root, no shell, labels", func(t *testing.T) {
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var archs []string
		for _, d := range m.Manifests {
			archs = append(archs, d.Platform.OS+"/"+d.Platform.Architecture)
		}
		if !slices.Equal(archs, []string{"linux/amd64", "linux/arm64"}) {
			t.Fatalf("platforms %v", archs)
		}
		for _, p := range Platforms {
			img, err := PlatformImage(idx, p)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Architecture != p.Architecture || cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/mcsd"}) ||
				!cf.Created.Equal(meta.Created) {
				t.Errorf("%s: config %+v", p.Architecture, cf)
			}
			for k, want := range map[string]string{
				"org.opencontainers.image.source": Source, "org.opencontainers.image.revision": meta.Revision,
				"org.opencontainers.image.version": meta.Version, "org.opencontainers.image.created": "2026-11-25T12:00:00Z",
			} {
				if got := cf.Config.Labels[k]; got != want {
					t.Errorf("%s: label %s = %q, want %q", p.Architecture, k, got, want)
				}
			}
			fs, bin := files(t, img)
			if fs["mcsd"] != 0o755 || string(bin) != "mcsd for "+p.Architecture {
				t.Errorf("%s: /mcsd mode %o, content %q", p.Architecture, fs["mcsd"], bin)
			}
			for f := range fs {
				if strings.HasPrefix(f, "bin/") || strings.HasPrefix(f, "usr/") || strings.Contains(f, "sh") && f != "etc/passwd" {
					t.Errorf("%s: unexpected file %s", p.Architecture, f)
				}
			}
		}
	})
	t.Run("written as an OCI layout, an OCI archive and a Docker archive", func(t *testing.T) {
		out := t.TempDir()
		if err := Write(idx, out, "mcsd:dev"); err != nil {
			t.Fatal(err)
		}
		p, err := layout.FromPath(filepath.Join(out, "image"))
		if err != nil {
			t.Fatal(err)
		}
		read, err := p.ImageIndex()
		if err != nil {
			t.Fatal(err)
		}
		if d1, d2 := digestOf(t, idx), digestOf(t, read); d1 != d2 {
			t.Errorf("layout holds %s, built %s", d2, d1)
		}
		tag, _ := name.NewTag("mcsd:dev")
		img, err := tarball.ImageFromPath(filepath.Join(out, "mcsd-image-"+runtime.GOARCH+".docker.tar"), &tag)
		if err != nil {
			t.Fatal(err)
		}
		if cf, err := img.ConfigFile(); err != nil || cf.Architecture != runtime.GOARCH {
			t.Errorf("Docker archive: %v %v", cf, err)
		}
		if fi, err := os.Stat(filepath.Join(out, "mcsd-image.oci.tar")); err != nil || fi.Size() == 0 {
			t.Errorf("OCI archive: %v", err)
		}
	})
	t.Run("pushed to a registry as one index", func(t *testing.T) {
		srv := httptest.NewServer(registry.New(registry.Logger(nopLogger())))
		defer srv.Close()
		image := strings.TrimPrefix(srv.URL, "http://") + "/mcsd/mcsd:v0.1.0"
		if err := Push(context.Background(), idx, image); err != nil {
			t.Fatal(err)
		}
		ref, _ := name.ParseReference(image)
		got, err := remote.Index(ref)
		if err != nil {
			t.Fatal(err)
		}
		if d1, d2 := digestOf(t, idx), digestOf(t, got); d1 != d2 {
			t.Errorf("registry holds %s, pushed %s", d2, d1)
		}
	})
}

// TestBinaryRuns builds the image of this machine's platform with the real
// binary and runs the binary it holds: static, it starts without anything
// else from the image. The project builds and tests on linux only (the
// testbed needs network namespaces), where this runs.
func TestBinaryRuns(t *testing.T) {
	wd, _ := os.Getwd()
	if err := os.Chdir(filepath.Join(wd, "..", "..")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chdir(wd) })
	host := v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
	idx, err := Build(t.Context(), Options{Meta: meta, Binary: goBuild, Platforms: []v1.Platform{host}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := PlatformImage(idx, host)
	if err != nil {
		t.Fatal(err)
	}
	_, bin := files(t, img)
	path := filepath.Join(t.TempDir(), "mcsd")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), path, "--help")
	cmd.Env = []string{"PATH=/"} // as the image's
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--registry") {
		t.Fatalf("the image's /mcsd --help: %v\n%s", err, out)
	}
}

func digestOf(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }
