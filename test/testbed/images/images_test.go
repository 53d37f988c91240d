package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func layerOf(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func imageOf(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestLoadAndFind(t *testing.T) {
	dir := t.TempDir()
	img := imageOf(t, layerOf(t, entry{name: "hello", body: "hi", typ: tar.TypeReg, mode: 0o644}))
	want, _ := img.Digest()

	// A Docker archive, under its tag; found by any spelling of the name.
	tag, _ := name.NewTag("example/app:1")
	docker := filepath.Join(dir, "app.tar")
	if err := tarball.WriteToFile(docker, tag, img); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(docker, ""); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"example/app:1", "docker.io/example/app:1", "index.docker.io/example/app:1"} {
		got, ok, err := s.Find(ref)
		if err != nil || !ok {
			t.Fatalf("Find(%s): %v, %v", ref, ok, err)
		}
		if d, _ := got.Digest(); d != want {
			t.Errorf("Find(%s): digest %s, want %s", ref, d, want)
		}
	}
	if _, ok, _ := s.Find("example/app:2"); ok {
		t.Error("Find(example/app:2) found an image never loaded")
	}

	// An OCI layout holding an index: the host platform's image, by the
	// name given; loading a name again replaces what it named.
	other := imageOf(t, layerOf(t, entry{name: "other", body: "x", typ: tar.TypeReg, mode: 0o644}))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "other-arch"}}},
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	oci := filepath.Join(dir, "layout")
	if _, err := layout.Write(oci, idx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(oci, ""); err == nil {
		t.Error("an OCI layout loaded without a name")
	}
	if _, err := s.Load(oci, "example/app:1"); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Find("example/app:1")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if d, _ := got.Digest(); d != mustDigest(t, other) {
		t.Errorf("after loading the layout: digest %s, want the host platform's %s", d, mustDigest(t, other))
	}
	refs, _ := s.List()
	if len(refs) != 1 {
		t.Errorf("store lists %v, want one name", refs)
	}
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestUnpack(t *testing.T) {
	root := filepath.Join(t.TempDir(), "rootfs")
	img := imageOf(t,
		layerOf(t,
			entry{name: "bin/", typ: tar.TypeDir, mode: 0o755},
			entry{name: "bin/app", body: "#app", typ: tar.TypeReg, mode: 0o755},
			entry{name: "etc/gone", body: "old", typ: tar.TypeReg, mode: 0o644},
			entry{name: "link", link: "bin/app", typ: tar.TypeSymlink},
		),
		layerOf(t,
			entry{name: "etc/.wh.gone", typ: tar.TypeReg},
			entry{name: "hard", link: "bin/app", typ: tar.TypeLink},
		),
	)
	if err := Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "bin/app")); err != nil || string(b) != "#app" {
		t.Errorf("bin/app: %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(root, "bin/app")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("bin/app mode: %v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/gone")); !os.IsNotExist(err) {
		t.Errorf("a file whited out by a later layer is there: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(root, "link")); err != nil || target != "bin/app" {
		t.Errorf("link: %q, %v", target, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "hard")); err != nil || string(b) != "#app" {
		t.Errorf("hard link: %q, %v", b, err)
	}

	// No entry lands outside the root: neither by .. nor through a link.
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	root2 := filepath.Join(t.TempDir(), "rootfs")
	if err := Unpack(imageOf(t, layerOf(t, entry{name: "../../escaped", body: "x", typ: tar.TypeReg, mode: 0o644})), root2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root2, "../../escaped")); err == nil {
		t.Error("../../escaped was written outside the root")
	}
	for _, layers := range [][]v1.Layer{
		{layerOf(t, entry{name: "out", link: outside, typ: tar.TypeSymlink}, entry{name: "out/through-link", body: "x", typ: tar.TypeReg, mode: 0o644})},
		{layerOf(t, entry{name: "out", link: outside, typ: tar.TypeSymlink}), layerOf(t, entry{name: "out/through-link", body: "x", typ: tar.TypeReg, mode: 0o644})},
	} {
		_ = Unpack(imageOf(t, layers...), filepath.Join(t.TempDir(), "rootfs"))
		if _, err := os.Stat(filepath.Join(outside, "through-link")); err == nil {
			t.Fatal("an entry was written through a symbolic link, outside the root")
		}
	}
}
