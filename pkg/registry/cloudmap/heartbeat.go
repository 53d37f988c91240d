package cloudmap

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
)

// A cluster's heartbeat is the description of a Cloud Map service of its
// own in the system namespace, "hb-<owner prefix>", which it rewrites with
// UpdateService every TTL/3. UpdateService is an UPDATE_SERVICE operation,
// which the change feed does not list (it lists instance operations only):
// other clusters' heartbeats cost a watcher no call each, and one
// ListServices of the system namespace (per 100 clusters) reads them all,
// every TTL/3. The service holds no instance.

const (
	// beatServicePrefix starts the name of each cluster's heartbeat
	// service.
	beatServicePrefix = "hb-"
	// beatDescPrefix starts a heartbeat service's description, followed by
	// the heartbeat as compact JSON.
	beatDescPrefix = "mcsd heartbeat "
	// maxDescription is the longest description Cloud Map stores.
	maxDescription = 1024
)

// beatServiceName is the name of the heartbeat service of the cluster with
// owner prefix prefix.
func beatServiceName(prefix string) string { return beatServicePrefix + prefix }

// heartbeat is one cluster's last heartbeat.
type heartbeat struct {
	ClusterSet string `json:"clusterSet"`
	Cluster    string `json:"cluster"`
	// Instance is registry.Identity.Instance of the cluster that wrote it.
	Instance string `json:"instance,omitempty"`
	// At is the Unix time in ms of the heartbeat.
	At int64 `json:"at"`
	// TTL is the cluster's TTL in ms: how long after At its records are
	// ignored.
	TTL int64 `json:"ttl"`
	// Since is the Unix time in ms when the cluster's records last became
	// live (registry.Cluster.Since); 0 when unknown.
	Since int64 `json:"since,omitempty"`
}

// heartbeat is the description of the cluster's heartbeat service at Unix
// time nowMs, with the given TTL, its records live since sinceMs.
func (e encoder) heartbeat(nowMs, sinceMs int64, ttl time.Duration) string {
	data, _ := json.Marshal(heartbeat{ClusterSet: e.id.ClusterSet, Cluster: e.id.Cluster, Instance: e.id.Instance, At: nowMs, TTL: ttl.Milliseconds(), Since: sinceMs})
	return beatDescPrefix + string(data)
}

// decodeHeartbeat reads a heartbeat service's description.
func decodeHeartbeat(desc string) (heartbeat, bool) {
	var hb heartbeat
	rest, ok := strings.CutPrefix(desc, beatDescPrefix)
	if !ok || json.Unmarshal([]byte(rest), &hb) != nil || hb.Cluster == "" || hb.At <= 0 {
		return heartbeat{}, false
	}
	return hb, true
}

// heartbeatFits reports whether the heartbeat of the cluster and clusterset
// of e fits in a description.
func (e encoder) heartbeatFits() bool {
	return len(e.heartbeat(math.MaxInt64, math.MaxInt64, time.Duration(math.MaxInt64))) <= maxDescription
}

// beat writes the heartbeat with the current time.
func (b *Backend) beat(ctx context.Context) error {
	desc := b.enc.heartbeat(b.now().UnixMilli(), b.since, b.opts.TTL)
	name := beatServiceName(b.enc.prefix)
	err := b.describe(ctx, b.systemService(name), desc)
	if isNotFound(err) {
		// The system namespace or the service was deleted: create it again.
		svc, eerr := b.recreateSystemService(ctx, name)
		if eerr != nil {
			return eerr
		}
		err = b.describe(ctx, svc, desc)
	}
	return err
}

// describe sets the description of svc and waits until Cloud Map has
// stored it.
func (b *Backend) describe(ctx context.Context, svc service, desc string) error {
	out, err := b.api.UpdateService(ctx, &sd.UpdateServiceInput{Id: aws.String(svc.ID), Service: &types.ServiceChange{Description: aws.String(desc)}})
	if err == nil {
		_, err = b.waitOperation(ctx, aws.ToString(out.OperationId))
	}
	if err != nil {
		return fmt.Errorf("update service %s: %w", svc.Name, err)
	}
	return nil
}

// beatUntilStopped refreshes the heartbeat every TTL/3 until stop is
// called (stop waits for a refresh under way), while the start's scan runs.
func (b *Backend) beatUntilStopped(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(b.opts.heartbeatInterval())
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := b.beat(ctx); err != nil && ctx.Err() == nil {
				b.log.Error(err, "cannot refresh heartbeat during the start's scan")
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// heartbeatLoop refreshes the heartbeat every TTL/3 until Close, and sooner
// after a failure.
func (b *Backend) heartbeatLoop() {
	defer close(b.done)
	interval := b.opts.heartbeatInterval()
	retry := min(interval, time.Second)
	t := time.NewTimer(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.ctx, interval)
		err := b.beat(ctx)
		cancel()
		if b.ctx.Err() != nil {
			return
		}
		next := interval
		switch {
		case err != nil:
			b.log.Error(err, "cannot refresh heartbeat, retrying", "retryIn", retry)
			next = retry
			failing = true
		case failing:
			b.log.Info("heartbeat refreshed again")
			failing = false
		}
		t.Reset(next)
	}
}
