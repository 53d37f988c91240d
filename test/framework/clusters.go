package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcsd-io/mcsd/internal/manager"
)

// Leases that the control plane's singletons hold, and that a restarted
// cluster's new processes wait for when the stopped ones held them.
const (
	nodeLeaseNamespace   = "kube-node-lease"
	leaderLeaseNamespace = "kube-system"
)

var leaderLeases = []string{"kube-controller-manager", "kube-scheduler"}

// StopCluster stops cluster id's control plane, keeping its state: a
// cluster outage. Stop the cluster's mcsd first (StopController).
//
// kwok-controller holds the node leases (200s) under an identity that is new
// in every process, and tries to take a lease again only every 50s: a
// restarted one would leave the nodes unmanaged, and new pods Pending, for
// minutes. The node leases are deleted just before the stop, so that the
// restarted kwok-controller creates them at once.
func (e *Env) StopCluster(ctx context.Context, id string) error {
	c := e.TB.Cluster(id)
	if c == nil {
		return fmt.Errorf("no cluster %s", id)
	}
	cl, err := client.New(c.Config, client.Options{Scheme: manager.Scheme})
	if err != nil {
		return err
	}
	if err := cl.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(nodeLeaseNamespace)); err != nil {
		return fmt.Errorf("release node leases of %s: %w", id, err)
	}
	return c.Stop(ctx)
}

// RestartCluster starts a cluster that StopCluster stopped and waits until
// it can run pods again: the leader leases that the stopped
// kube-controller-manager and kube-scheduler held are deleted, so that the
// new ones lead at once rather than after the leases expire, and every node
// has a node lease again (kwok-controller manages it).
func (e *Env) RestartCluster(ctx context.Context, id string) error {
	c := e.TB.Cluster(id)
	if c == nil {
		return fmt.Errorf("no cluster %s", id)
	}
	started := time.Now()
	if err := c.Restart(ctx); err != nil {
		return err
	}
	cl, err := client.New(c.Config, client.Options{Scheme: manager.Scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, name := range leaderLeases {
		l := &coordinationv1.Lease{}
		err := cl.Get(ctx, client.ObjectKey{Namespace: leaderLeaseNamespace, Name: name}, l)
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("get lease %s of %s: %w", name, id, err)
		}
		if err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Before(started) {
			// Held by the stopped process.
			if err := cl.Delete(ctx, l, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("release lease %s of %s: %w", name, id, err)
			}
		}
	}
	for {
		missing, err := missingLeases(ctx, cl, started)
		if err == nil && len(missing) == 0 {
			return nil
		}
		if err != nil {
			missing = []string{err.Error()}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s restarted but not running: waiting for leases %v: %w", id, missing, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// missingLeases lists the leader and node leases not renewed since started.
func missingLeases(ctx context.Context, cl client.Client, started time.Time) ([]string, error) {
	var nodes corev1.NodeList
	if err := cl.List(ctx, &nodes); err != nil {
		return nil, err
	}
	if len(nodes.Items) == 0 {
		return nil, errors.New("no nodes")
	}
	want := map[client.ObjectKey]bool{}
	for _, n := range leaderLeases {
		want[client.ObjectKey{Namespace: leaderLeaseNamespace, Name: n}] = true
	}
	for _, n := range nodes.Items {
		want[client.ObjectKey{Namespace: nodeLeaseNamespace, Name: n.Name}] = true
	}
	var missing []string
	for key := range want {
		l := &coordinationv1.Lease{}
		err := cl.Get(ctx, key, l)
		if client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		if err != nil || l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(started) {
			missing = append(missing, key.String())
		}
	}
	return missing, nil
}
