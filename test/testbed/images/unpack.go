package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Unpack writes the image's file system, its layers applied in order with
// their whiteouts, into dir (a container's root file system): files,
// directories, symbolic and hard links with their modes and owners. No entry
// is written through a symbolic link or outside dir. Devices and fifos are
// left out: a container gets its /dev from the runtime.
func Unpack(img v1.Image, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("root file system: %w", err)
	}
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	// The flattened stream gives upper layers first: a hard link may come
	// before its target, so links are made last.
	var links []*tar.Header
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read image layers: %w", err)
		}
		if h.Typeflag == tar.TypeLink {
			links = append(links, h)
			continue
		}
		if err := unpackEntry(dir, h, tr); err != nil {
			return fmt.Errorf("unpack %s: %w", h.Name, err)
		}
	}
	for _, h := range links {
		if err := unpackEntry(dir, h, nil); err != nil {
			return fmt.Errorf("unpack %s: %w", h.Name, err)
		}
	}
	return nil
}

func unpackEntry(dir string, h *tar.Header, r io.Reader) error {
	target, err := within(dir, h.Name)
	if err != nil {
		return err
	}
	if target == filepath.Clean(dir) {
		return os.Chmod(dir, os.FileMode(h.Mode).Perm()) // the root's own entry
	}
	if err := noLinkAbove(dir, target); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(h.Mode).Perm() | os.FileMode(h.Mode)&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(target, mode); err != nil && !os.IsExist(err) {
			return err
		}
	case tar.TypeReg:
		_ = os.Remove(target)
		if err := writeFile(target, r, mode); err != nil {
			return err
		}
	case tar.TypeSymlink:
		_ = os.Remove(target)
		if err := os.Symlink(h.Linkname, target); err != nil {
			return err
		}
		return os.Lchown(target, h.Uid, h.Gid)
	case tar.TypeLink:
		src, err := within(dir, h.Linkname)
		if err != nil {
			return err
		}
		if err := noLinkAbove(dir, src); err != nil {
			return err
		}
		_ = os.Remove(target)
		return os.Link(src, target)
	default:
		return nil // devices and fifos: a container gets its /dev from the runtime
	}
	if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
		return err
	}
	// chown clears the set-id bits; put the mode back.
	return os.Chmod(target, mode)
}

// noLinkAbove fails when a directory between dir and target is a symbolic
// link (an entry would be written outside the root file system).
func noLinkAbove(dir, target string) error {
	rel, err := filepath.Rel(dir, filepath.Dir(target))
	if err != nil || rel == "." {
		return err
	}
	p := dir
	for _, part := range strings.Split(rel, string(os.PathSeparator)) {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symbolic link", p)
		}
	}
	return nil
}
