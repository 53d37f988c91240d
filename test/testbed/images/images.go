// Package images is the testbed's local image store: the images that pods
// of the testbed run as containers, loaded from an archive the way `kind
// load image-archive` loads one. Nothing is ever pulled: a pod whose image is
// not here runs as a host program, or not at all (see the agent).
//
// The store is an OCI image layout; each image carries its reference (as
// Docker normalises it: mcsd:dev is docker.io/library/mcsd:dev) in the
// annotation io.containerd.image.name.
package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// NameAnnotation holds an image's reference in the store's index.
const NameAnnotation = "io.containerd.image.name"

// Store is an image store in a directory.
type Store struct{ dir string }

// Open returns the store in dir, creating it when it does not exist.
func Open(dir string) (*Store, error) {
	if _, err := layout.FromPath(dir); err != nil {
		if _, err := layout.Write(dir, empty.Index); err != nil {
			return nil, fmt.Errorf("create image store %s: %w", dir, err)
		}
	}
	return &Store{dir: dir}, nil
}

// Normalize returns ref as Docker names it (mcsd:dev is
// docker.io/library/mcsd:dev), or an error for a reference that is not one.
func Normalize(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return r.Name(), nil
}

// Load adds the images of an archive to the store: a Docker archive (docker
// save, make image's mcsd-image-<arch>.docker.tar), under each of its tags;
// or an OCI layout, as a directory or a tar of one (make image's
// _output/image and mcsd-image.oci.tar), under ref, taking from an index the
// image of the host's platform. ref overrides a Docker archive's tags. It
// returns the references loaded.
func (s *Store) Load(path, ref string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("image archive: %w", err)
	}
	if st.IsDir() {
		return s.loadLayout(path, ref)
	}
	if tags, err := dockerTags(path); err == nil {
		if ref != "" {
			tags = []string{ref}
		}
		if len(tags) == 0 {
			return nil, fmt.Errorf("docker archive %s has no tag; give the image a name", path)
		}
		img, err := tarball.ImageFromPath(path, nil)
		if err != nil {
			return nil, fmt.Errorf("read docker archive %s: %w", path, err)
		}
		var loaded []string
		for _, t := range tags {
			tag, err := name.NewTag(t)
			if err != nil {
				return nil, fmt.Errorf("tag %q: %w", t, err)
			}
			if err := s.put(tag.Name(), img); err != nil {
				return nil, err
			}
			loaded = append(loaded, tag.Name())
		}
		return loaded, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(s.dir), "oci-archive-")
	if err != nil {
		return nil, fmt.Errorf("unpack OCI archive: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := untarPlain(path, tmp); err != nil {
		return nil, err
	}
	return s.loadLayout(tmp, ref)
}

func dockerTags(path string) ([]string, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return nil, err
	}
	if len(m) != 1 {
		return nil, fmt.Errorf("docker archive %s holds %d images; load one at a time", path, len(m))
	}
	return m[0].RepoTags, nil
}

func (s *Store) loadLayout(dir, ref string) ([]string, error) {
	if ref == "" {
		return nil, errors.New("an OCI layout names no image; give the image a name")
	}
	n, err := Normalize(ref)
	if err != nil {
		return nil, err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("read OCI layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("read OCI layout %s: %w", dir, err)
	}
	img, err := hostImage(idx)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return []string{n}, s.put(n, img)
}

// hostImage finds, in an index and the indexes it holds, the image of the
// host's platform (or the only image).
func hostImage(idx v1.ImageIndex) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, err
			}
			if img, err := hostImage(child); err == nil {
				return img, nil
			}
		case d.MediaType.IsImage() && (d.Platform == nil && len(m.Manifests) == 1 ||
			d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH):
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for linux/%s", runtime.GOARCH)
}

// put stores img under the normalised reference n, replacing what n named.
func (s *Store) put(n string, img v1.Image) error {
	p, err := layout.FromPath(s.dir)
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	if err := p.RemoveDescriptors(match.Annotation(NameAnnotation, n)); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{NameAnnotation: n})); err != nil {
		return fmt.Errorf("store image %s: %w", n, err)
	}
	return nil
}

// Find returns the image stored under ref, or false.
func (s *Store) Find(ref string) (v1.Image, bool, error) {
	n, err := Normalize(ref)
	if err != nil {
		return nil, false, err
	}
	p, err := layout.FromPath(s.dir)
	if err != nil {
		return nil, false, fmt.Errorf("image store: %w", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, false, fmt.Errorf("image store: %w", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, false, fmt.Errorf("image store: %w", err)
	}
	for _, d := range m.Manifests {
		if d.Annotations[NameAnnotation] == n {
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, false, fmt.Errorf("image %s: %w", n, err)
			}
			return img, true, nil
		}
	}
	return nil, false, nil
}

// List returns the references stored.
func (s *Store) List() ([]string, error) {
	p, err := layout.FromPath(s.dir)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	var refs []string
	for _, d := range m.Manifests {
		if n := d.Annotations[NameAnnotation]; n != "" {
			refs = append(refs, n)
		}
	}
	return refs, nil
}

// untarPlain unpacks a tar of regular files and directories (an OCI archive)
// into dir.
func untarPlain(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open OCI archive: %w", err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		target, err := within(dir, h.Name)
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := writeFile(target, tr, 0o644); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry %s is neither a file nor a directory; is it an OCI archive?", path, h.Name)
		}
	}
}

// within returns dir joined with an archive entry's name: cleaned as an
// absolute path first, so that no ".." leaves dir.
func within(dir, entry string) (string, error) {
	if entry == "" {
		return "", errors.New("archive entry without a name")
	}
	return filepath.Join(dir, filepath.Clean("/"+entry)), nil
}

func writeFile(path string, r io.Reader, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
