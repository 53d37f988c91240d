package etcd

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

// RootUser is etcd's administrator: etcd enables auth only once it exists
// with the root role.
const RootUser = "root"

// ClusterUser is the etcd user (and role) of one cluster of a clusterset:
// readwrite on the cluster's own prefix, read on the clusterset's. With
// client certificates it is the certificate's common name. Ids that follow
// the id rule (registry.ValidateClusterID) hold no ':', so no two
// (clusterset, cluster) pairs share a user, and none is a ReaderUser.
func ClusterUser(clusterSet, cluster string) string {
	return "mcsd:" + clusterSet + ":" + cluster
}

// ReaderUser is the read-only etcd user (and role) of a clusterset, for
// mcsd status: read on the clusterset's prefix, nothing else.
func ReaderUser(clusterSet string) string {
	return "mcsd-reader:" + clusterSet
}

// AuthOptions say which etcd users and roles SetupAuth prepares.
type AuthOptions struct {
	// Prefix is the key prefix of all mcsd records. Default "/mcsd".
	Prefix string
	// ClusterSet is the clusterset the users are for.
	ClusterSet string
	// Clusters get a user and role each (ClusterUser).
	Clusters []string
	// Reader adds the read-only user and role (ReaderUser).
	Reader bool
	// Passwords gives each user it creates a random password, reported in
	// AuthUser.Password. Without it users have none and authenticate with a
	// client certificate only. Existing users keep their password.
	Passwords bool
	// EnableAuth creates the root user (with RootPassword, or with none,
	// which means a certificate whose common name is root) and role if
	// missing, and enables auth.
	EnableAuth bool
	// RootPassword is the root user's password, if SetupAuth creates it.
	RootPassword string
}

// Default fills the unset fields with their defaults.
func (o *AuthOptions) Default() {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
}

// Validate reports whether SetupAuth can run with o.
func (o *AuthOptions) Validate() error {
	if err := registry.ValidateClusterSetID(o.ClusterSet); err != nil {
		return err
	}
	if len(o.Clusters) == 0 && !o.Reader {
		return errors.New("no cluster and no reader: nothing to set up")
	}
	for _, c := range o.Clusters {
		if err := registry.ValidateClusterID(c); err != nil {
			return err
		}
	}
	if o.Prefix == "" {
		return errors.New("empty key prefix")
	}
	return nil
}

// AuthUser is one user SetupAuth prepared.
type AuthUser struct {
	// Name is the user's name, and the name of its role.
	Name string
	// Cluster is the cluster the user writes for; empty for the reader.
	Cluster string
	// Created is false for a user that existed already.
	Created bool
	// Password is the password given to a created user, when asked for.
	Password string
	// ReadWrite and Read are the key prefixes the role grants.
	ReadWrite, Read []string
}

// SetupAuth prepares etcd for a clusterset: for each cluster a user and a
// role with readwrite on the cluster's own prefix and read on the
// clusterset's prefix, and optionally a read-only user; then, if asked,
// enables auth. It can run again: what exists is kept, grants are made
// again, and a user's password is never changed. cli must be able to manage
// auth (root, once auth is on).
func SetupAuth(ctx context.Context, cli *clientv3.Client, opts AuthOptions) ([]AuthUser, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("etcd auth options: %w", err)
	}
	k := newKeys(opts.Prefix, opts.ClusterSet)
	var users []AuthUser
	for _, c := range slices.Compact(slices.Sorted(slices.Values(opts.Clusters))) {
		users = append(users, AuthUser{Name: ClusterUser(opts.ClusterSet, c), Cluster: c,
			ReadWrite: []string{k.cluster(c)}, Read: []string{k.clusters()}})
	}
	if opts.Reader {
		users = append(users, AuthUser{Name: ReaderUser(opts.ClusterSet), Read: []string{k.clusters()}})
	}
	for i := range users {
		if err := setupUser(ctx, cli, &users[i], opts.Passwords); err != nil {
			return users[:i], err
		}
	}
	if opts.EnableAuth {
		if err := enableAuth(ctx, cli, opts.RootPassword); err != nil {
			return users, err
		}
	}
	return users, nil
}

func setupUser(ctx context.Context, cli *clientv3.Client, u *AuthUser, passwords bool) error {
	if err := addRole(ctx, cli, u.Name); err != nil {
		return err
	}
	for _, p := range u.ReadWrite {
		if _, err := cli.RoleGrantPermission(ctx, u.Name, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return fmt.Errorf("grant role %s readwrite on %s: %w", u.Name, p, err)
		}
	}
	for _, p := range u.Read {
		if slices.Contains(u.ReadWrite, p) {
			continue
		}
		if _, err := cli.RoleGrantPermission(ctx, u.Name, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermRead)); err != nil {
			return fmt.Errorf("grant role %s read on %s: %w", u.Name, p, err)
		}
	}
	password := ""
	if passwords {
		var err error
		if password, err = randomPassword(); err != nil {
			return err
		}
	}
	created, err := addUser(ctx, cli, u.Name, password)
	if err != nil {
		return err
	}
	u.Created = created
	if created {
		u.Password = password
	}
	if err := grantRole(ctx, cli, u.Name, u.Name); err != nil {
		return err
	}
	return nil
}

// enableAuth creates the root user and role if missing and enables auth.
func enableAuth(ctx context.Context, cli *clientv3.Client, rootPassword string) error {
	if err := addRole(ctx, cli, RootUser); err != nil {
		return err
	}
	if _, err := addUser(ctx, cli, RootUser, rootPassword); err != nil {
		return err
	}
	if err := grantRole(ctx, cli, RootUser, RootUser); err != nil {
		return err
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable auth: %w", err)
	}
	return nil
}

func addRole(ctx context.Context, cli *clientv3.Client, name string) error {
	if _, err := cli.RoleAdd(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("add role %s: %w", name, err)
	}
	return nil
}

// addUser adds a user, with no password when password is empty; it reports
// false for a user that exists already.
func addUser(ctx context.Context, cli *clientv3.Client, name, password string) (bool, error) {
	_, err := cli.UserAddWithOptions(ctx, name, password, &clientv3.UserAddOptions{NoPassword: password == ""})
	switch {
	case errors.Is(err, rpctypes.ErrUserAlreadyExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("add user %s: %w", name, err)
	}
	return true, nil
}

func grantRole(ctx context.Context, cli *clientv3.Client, user, role string) error {
	resp, err := cli.UserGet(ctx, user)
	if err != nil {
		return fmt.Errorf("read user %s: %w", user, err)
	}
	if slices.Contains(resp.Roles, role) {
		return nil
	}
	if _, err := cli.UserGrantRole(ctx, user, role); err != nil {
		return fmt.Errorf("grant user %s role %s: %w", user, role, err)
	}
	return nil
}

func randomPassword() (string, error) {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// permissionHint adds to a permission error of etcd what the cluster's user
// needs; other errors are returned as they are.
func (b *Backend) permissionHint(err error) error {
	if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		return err
	}
	return fmt.Errorf("%w (this cluster's etcd user, %s by mcsd registry setup-auth, needs readwrite on %s and read on %s)",
		err, ClusterUser(b.opts.Identity.ClusterSet, b.opts.Identity.Cluster),
		b.keys.cluster(b.opts.Identity.Cluster), b.keys.clusters())
}
