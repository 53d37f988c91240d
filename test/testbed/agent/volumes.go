package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The volumes of pods with image containers, as a kubelet sets them up, in
// the pod's directory: emptyDir, ConfigMap, Secret, downward API and
// projected volumes (the ServiceAccount token that the API server's
// admission adds to every pod among them, requested for the pod). Files
// are written once, when the pod starts (a kubelet refreshes them; the
// testbed's pods live minutes). With the pod's fsGroup, files and
// directories belong to that group and its members can read them.

// apiSource reads ConfigMaps and Secrets of one namespace from the API.
type apiSource struct {
	ctx       context.Context
	a         *Agent
	namespace string
}

func (s apiSource) configMap(name string) (map[string]string, error) {
	cm, err := s.a.cs.CoreV1().ConfigMaps(s.namespace).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", name, err)
	}
	return keysOf(cm.Data, cm.BinaryData), nil
}

func (s apiSource) secret(name string) (map[string]string, error) {
	sec, err := s.a.cs.CoreV1().Secrets(s.namespace).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return keysOf(sec.StringData, sec.Data), nil
}

// keysOf merges an object's text and binary keys.
func keysOf(text map[string]string, binary map[string][]byte) map[string]string {
	out := maps.Clone(text)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range binary {
		out[k] = string(v)
	}
	return out
}

// prepareVolumes writes the pod's volumes under its directory; each
// volume's directory by name in sb.volumes.
func (a *Agent) prepareVolumes(ctx context.Context, pod *corev1.Pod, sb *sandbox) error {
	sb.volumes, sb.writable = map[string]string{}, map[string]bool{}
	var fsGroup *int64
	if pod.Spec.SecurityContext != nil {
		fsGroup = pod.Spec.SecurityContext.FSGroup
	}
	src := apiSource{ctx: ctx, a: a, namespace: pod.Namespace}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(sb.dir, "volumes", v.Name)
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		files, err := a.volumeFiles(ctx, pod, v, src)
		if err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if v.EmptyDir != nil {
			if err := ownVolume(dir, 0o777, fsGroup); err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
		} else if err := writeVolume(dir, files, fsGroup); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		sb.volumes[v.Name], sb.writable[v.Name] = dir, v.EmptyDir != nil
	}
	return nil
}

// volumeFile is one file of a volume: its path in the volume, content and
// mode.
type volumeFile struct {
	path string
	data []byte
	mode os.FileMode
}

func (a *Agent) volumeFiles(ctx context.Context, pod *corev1.Pod, v corev1.Volume, src apiSource) ([]volumeFile, error) {
	switch {
	case v.EmptyDir != nil:
		return nil, nil
	case v.ConfigMap != nil:
		return keyFiles(src.configMap, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, v.ConfigMap.Optional)
	case v.Secret != nil:
		return keyFiles(src.secret, v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, v.Secret.Optional)
	case v.DownwardAPI != nil:
		return downwardFiles(pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
	case v.Projected != nil:
		var out []volumeFile
		for _, p := range v.Projected.Sources {
			var files []volumeFile
			var err error
			switch {
			case p.ServiceAccountToken != nil:
				files, err = a.tokenFile(ctx, pod, p.ServiceAccountToken, v.Projected.DefaultMode)
			case p.ConfigMap != nil:
				files, err = keyFiles(src.configMap, p.ConfigMap.Name, p.ConfigMap.Items, v.Projected.DefaultMode, p.ConfigMap.Optional)
			case p.Secret != nil:
				files, err = keyFiles(src.secret, p.Secret.Name, p.Secret.Items, v.Projected.DefaultMode, p.Secret.Optional)
			case p.DownwardAPI != nil:
				files, err = downwardFiles(pod, p.DownwardAPI.Items, v.Projected.DefaultMode)
			default:
				err = errors.New("projected source not supported by the testbed")
			}
			if err != nil {
				return nil, err
			}
			out = append(out, files...)
		}
		return out, nil
	}
	return nil, errors.New("the testbed supports emptyDir, configMap, secret, downwardAPI and projected volumes")
}

func fileMode(m *int32) os.FileMode {
	if m == nil {
		return 0o644
	}
	return os.FileMode(*m)
}

// keyFiles are the files of a ConfigMap or Secret volume: every key, or
// the items named, with their modes.
func keyFiles(read func(string) (map[string]string, error), name string, items []corev1.KeyToPath, defaultMode *int32, optional *bool) ([]volumeFile, error) {
	data, err := read(name)
	if err != nil {
		if ptr.Deref(optional, false) && apierrors.IsNotFound(errors.Unwrap(err)) {
			return nil, nil
		}
		return nil, err
	}
	var out []volumeFile
	if len(items) == 0 {
		for k, v := range data {
			out = append(out, volumeFile{path: k, data: []byte(v), mode: fileMode(defaultMode)})
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if ptr.Deref(optional, false) {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q", name, it.Key)
		}
		mode := fileMode(defaultMode)
		if it.Mode != nil {
			mode = os.FileMode(*it.Mode)
		}
		out = append(out, volumeFile{path: it.Path, data: []byte(v), mode: mode})
	}
	return out, nil
}

func downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, defaultMode *int32) ([]volumeFile, error) {
	var out []volumeFile
	for _, it := range items {
		if it.FieldRef == nil {
			return nil, fmt.Errorf("downward API file %s: the testbed supports fieldRef only", it.Path)
		}
		v, err := fieldValue(pod, it.FieldRef.FieldPath)
		if err != nil {
			return nil, fmt.Errorf("downward API file %s: %w", it.Path, err)
		}
		mode := fileMode(defaultMode)
		if it.Mode != nil {
			mode = os.FileMode(*it.Mode)
		}
		out = append(out, volumeFile{path: it.Path, data: []byte(v), mode: mode})
	}
	return out, nil
}

// tokenFile requests a token of the pod's ServiceAccount, bound to the pod,
// as the kubelet does for a projected serviceAccountToken source.
func (a *Agent) tokenFile(ctx context.Context, pod *corev1.Pod, p *corev1.ServiceAccountTokenProjection, defaultMode *int32) ([]volumeFile, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: p.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	tr, err := a.cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token of ServiceAccount %s: %w", sa, err)
	}
	return []volumeFile{{path: p.Path, data: []byte(tr.Status.Token), mode: fileMode(defaultMode)}}, nil
}

// writeVolume writes a volume's files under dir, none outside it.
func writeVolume(dir string, files []volumeFile, fsGroup *int64) error {
	for _, f := range files {
		p := filepath.Join(dir, filepath.Clean("/"+f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		if err := ownVolume(p, f.mode, fsGroup); err != nil {
			return err
		}
	}
	return nil
}

// ownVolume gives a volume's file or directory its mode, and with fsGroup
// that group, readable by it (and writable, for a directory, with the
// set-group-id bit so that new files join the group).
func ownVolume(path string, mode os.FileMode, fsGroup *int64) error {
	if fsGroup != nil {
		if err := os.Chown(path, 0, int(*fsGroup)); err != nil {
			return err
		}
		mode |= 0o040
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			mode |= 0o070 | os.ModeSetgid
		}
	}
	return os.Chmod(path, mode)
}

// containerMounts are the bind mounts of the container's volumeMounts:
// ConfigMap, Secret, downward API and projected volumes read-only, as
// the kubelet mounts them.
func (a *Agent) containerMounts(sb *sandbox, spec corev1.Container) ([]specs.Mount, error) {
	var out []specs.Mount
	for _, vm := range spec.VolumeMounts {
		dir, ok := sb.volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s: no such volume", vm.Name)
		}
		src := dir
		if vm.SubPath != "" {
			src = filepath.Join(dir, filepath.Clean("/"+vm.SubPath))
		}
		opts := []string{"rbind", "rprivate"}
		if vm.ReadOnly || !sb.writable[vm.Name] {
			opts = append(opts, "ro")
		}
		out = append(out, specs.Mount{Destination: vm.MountPath, Type: "bind", Source: src, Options: opts})
	}
	return out, nil
}
