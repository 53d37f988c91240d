package cloudmap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"

	"github.com/mcsd-io/mcsd/pkg/registry"
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

// live reports whether a heartbeat is younger, at now, than the TTL it
// carries (def when it carries none).
func (hb heartbeat) live(now time.Time, def time.Duration) bool {
	ttl := def
	if hb.TTL > 0 {
		ttl = time.Duration(hb.TTL) * time.Millisecond
	}
	return hb.At > 0 && now.Sub(time.UnixMilli(hb.At)) <= ttl
}

// sinceTime is hb.Since as a time; zero when unknown.
func (hb heartbeat) sinceTime() time.Time {
	if hb.Since <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(hb.Since)
}

// beat writes the heartbeat with the current time.
func (b *Backend) beat(ctx context.Context) error {
	now := b.now().UnixMilli()
	desc := b.enc.heartbeat(now, b.since, b.opts.TTL)
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
	if err == nil {
		b.lastBeat.Store(now)
	}
	return err
}

// beatExpired reports whether the last heartbeat written is older than the
// TTL: every watcher ignores the cluster's records, and another Kubernetes
// cluster given this cluster id may have started under it meanwhile.
func (b *Backend) beatExpired() bool {
	return b.now().Sub(time.UnixMilli(b.lastBeat.Load())) > b.opts.TTL
}

// lapsed returns why this cluster's records may not be live: another
// cluster has its id, or its heartbeat has expired (registry.Lapser); nil
// otherwise.
func (b *Backend) lapsed() error {
	if err := b.Fenced(); err != nil {
		return err
	}
	if b.beatExpired() {
		return fmt.Errorf("%w: every watcher ignores them, its heartbeat last written at %s, more than its TTL (%s) ago",
			registry.ErrRecordsLapsed, time.UnixMilli(b.lastBeat.Load()).UTC().Format(time.RFC3339), b.opts.TTL)
	}
	return nil
}

// errBeatExpired: a write while the heartbeat has expired waits until the
// heartbeat loop has looked for another cluster under this cluster's id
// (refresh).
var errBeatExpired = errors.New("the cluster's heartbeat has expired; writing again once it is refreshed")

// writable returns why the backend may not write now: another cluster has
// this cluster's id (Fenced), or the heartbeat has expired and the id is
// not checked yet. Called with the write lock held.
func (b *Backend) writable() error {
	if err := b.Fenced(); err != nil {
		return err
	}
	if b.beatExpired() {
		return errBeatExpired
	}
	return nil
}

// readBeat reads the cluster's heartbeat as Cloud Map holds it; ok is false
// when it holds none of this cluster's (a new service: the service's
// description says it was created by mcsd).
func (b *Backend) readBeat(ctx context.Context) (hb heartbeat, ok bool, err error) {
	name := beatServiceName(b.enc.prefix)
	var desc string
	out, err := b.api.GetService(ctx, &sd.GetServiceInput{Id: aws.String(b.systemService(name).ID)})
	switch {
	case isNotFound(err):
		// Deleted, and perhaps created again by another cluster under
		// this id: looked up by name.
		svc, err := b.recreateSystemService(ctx, name)
		if err != nil {
			return heartbeat{}, false, fmt.Errorf("read heartbeat: %w", err)
		}
		desc = svc.Desc
	case err != nil:
		return heartbeat{}, false, fmt.Errorf("read heartbeat: %w", err)
	case out.Service != nil:
		desc = aws.ToString(out.Service.Description)
	}
	hb, ok = decodeHeartbeat(desc)
	id := b.opts.Identity
	return hb, ok && hb.ClusterSet == id.ClusterSet && hb.Cluster == id.Cluster, nil
}

// refresh reads the cluster's heartbeat as Cloud Map holds it, then writes
// it (one GetService more per heartbeat: the last writer of the heartbeat
// service since this backend's previous beat tells whether another
// Kubernetes cluster given this cluster id writes under it too, another
// kube-system UID, registry.Identity.Instance). Such a cluster may have
// started while this one's heartbeat was expired (an outage longer than the
// TTL), deleting this cluster's records and writing its own; or the two
// started at once.
//
//   - While that cluster's heartbeat lives and its claim is the stronger
//     (yields), this backend writes nothing (Fenced returns
//     registry.ErrClusterIDInUse; its writes and withdrawals are refused),
//     and reads the heartbeat again at each interval.
//   - While it lives and this backend's claim is the stronger, this
//     backend goes on beating: that cluster yields at its next read. Once
//     it has stopped beating, this backend takes the id back (retake): the
//     records are its or that cluster's, both written under the id.
//   - Once it has expired (or at once, when that cluster has come and gone
//     during the outage), the cluster's records are its leftovers or this
//     backend's, deleted or replaced: retake deletes them and writes again
//     what this backend last wrote, then the heartbeat.
//
// A heartbeat of this backend's own, or of no known instance, is refreshed
// as usual: the records are as this backend left them. No heartbeat at all
// after an outage longer than the TTL (the service deleted) is taken as
// another's that has expired.
func (b *Backend) refresh(ctx context.Context) error {
	readCtx, cancel := context.WithTimeout(ctx, b.opts.heartbeatInterval()/3)
	hb, ok, err := b.readBeat(readCtx)
	cancel()
	if err != nil {
		if b.Fenced() != nil || b.beatExpired() {
			return err
		}
		// The read only checks: a heartbeat that is due does not wait for
		// it (a throttled GetService must not let the records expire, nor
		// a keeper's while the other cluster is still there).
		b.log.V(1).Info("cannot read the heartbeat before writing it", "reason", err.Error())
		return b.beat(ctx)
	}
	id, now := b.opts.Identity, b.now()
	other := ok && id.OtherInstance(hb.Instance)
	switch {
	case other && hb.live(now, b.opts.TTL) && b.yields(hb):
		err := id.InUseBy(hb.Instance, hb.sinceTime())
		b.fenced.Store(&err)
		return err
	case other && hb.live(now, b.opts.TTL):
		if b.contested.IsZero() {
			b.log.Info("another cluster writes under this cluster id; this one keeps it, and takes it back once that one has stopped", "instance", hb.Instance)
		}
		// That cluster beats every third of its TTL: once a little more
		// than that has passed without its beat, it has stopped.
		b.contested = now.Add(hb.interval(b.opts.TTL) * 3 / 2)
		return b.beat(ctx)
	case other || !ok && b.beatExpired() || b.Fenced() != nil || !b.contested.IsZero() && now.After(b.contested):
		// (!ok: the heartbeat service was deleted while this backend's
		// heartbeat was expired, as CleanupEmpty deletes one silent for a
		// day: who wrote under the id meanwhile is unknown.)
		if err := b.retake(b.ctx); err != nil {
			return fmt.Errorf("%w: %w", errRetake, err)
		}
		b.contested = time.Time{}
		return nil
	}
	return b.beat(ctx)
}

// yields reports whether this backend yields the cluster id to the writer
// of hb, another Kubernetes cluster given it: the one whose records became
// live the later keeps it (it took the id while this one's heartbeat was
// expired, or started last), the greater instance when both did at once.
func (b *Backend) yields(hb heartbeat) bool {
	if hb.Since != b.since {
		return hb.Since > b.since
	}
	return hb.Instance > b.opts.Identity.Instance
}

// interval is how often the writer of hb beats: a third of its TTL (def
// when it carries none).
func (hb heartbeat) interval(def time.Duration) time.Duration {
	if hb.TTL > 0 {
		return time.Duration(hb.TTL) * time.Millisecond / 3
	}
	return def / 3
}

// errRetake: retake failed. It reads every namespace of the account:
// tried again at the heartbeat's interval, not at once.
var errRetake = errors.New("take the cluster id back")

// retake makes the cluster's records this backend's again once another
// Kubernetes cluster given its id has run under it and its heartbeat has
// expired: it reads every record of the cluster (that cluster's and this
// one's), deletes them as a start after the TTL does, writes again what
// this backend last wrote of each Service, and then the heartbeat, so that
// watchers see the cluster come back whole. Writes wait meanwhile. Taken
// back from a cluster that yielded while this backend's heartbeat lived
// (keeper), the records stay live: the heartbeat goes on meanwhile, the
// Services this backend exports are written only where Cloud Map holds
// them otherwise, and the others' records are deleted.
func (b *Backend) retake(ctx context.Context) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	// keeper: taken back from a cluster that yielded. The records live,
	// and stay live while the take-back reads and writes (the other
	// cluster would take the id at an expired heartbeat); those as this
	// backend wrote them are not written again.
	keeper := !b.beatExpired() && b.Fenced() == nil
	stopBeats := func() {}
	if keeper {
		// Now, and every interval: the refresh that called this one
		// did not beat.
		if err := b.beat(ctx); err != nil {
			return fmt.Errorf("write heartbeat: %w", err)
		}
		stopBeats = b.beatUntilStopped(ctx)
	}
	defer func() { stopBeats() }()
	found, inherited, err := b.scanOwn(ctx, b.ownQuery())
	if err != nil {
		return fmt.Errorf("read the cluster's records: %w", err)
	}
	mine := b.own
	b.own = map[registry.ServiceKey]*ownService{}
	b.ownWatch.reset()
	drop := found
	if keeper {
		// Only the Services this backend does not export go whole; the
		// others are taken over as found, and written where they differ.
		drop = map[registry.ServiceKey]*ownService{}
		for key, o := range found {
			if m := mine[key]; m == nil || m.st.Spec == nil && !m.st.HasEndpoints {
				drop[key] = o
				continue
			}
			b.takeOver(key, o)
		}
	}
	if err := b.dropExpired(ctx, drop, inherited); err != nil {
		b.own = mine // what is still to write again, at the next try
		return err
	}
	written := 0
	for _, key := range slices.SortedFunc(maps.Keys(mine), registry.ServiceKey.Compare) {
		o := mine[key]
		if o.st.Spec == nil && !o.st.HasEndpoints {
			continue // the AWS controller's, taken over again above if still there
		}
		if n := b.own[key]; n != nil {
			// As found: the AWS controller's instances, or (keeper)
			// what Cloud Map holds under the id.
			n.created, n.st = o.created, o.st
		} else {
			b.own[key] = &ownService{svc: o.svc, created: o.created, st: o.st, stored: map[string]map[string]string{}}
		}
		if err := b.apply(ctx, key, o.st); err != nil {
			// That Service's next put (the export controller's retry)
			// writes it; the others, and the heartbeat, do not wait for
			// it.
			b.log.Error(err, "cannot write again the records of a Service", "service", key.String())
			continue
		}
		written++
	}
	stopBeats()
	if !keeper {
		b.since = b.now().UnixMilli()
	}
	if err := b.beat(ctx); err != nil {
		return fmt.Errorf("write heartbeat: %w", err)
	}
	b.fenced.Store(nil)
	b.log.Info("cluster id this cluster's again; its records written again", "services", written)
	return nil
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
// after a failure (refresh).
func (b *Backend) heartbeatLoop() {
	defer close(b.done)
	interval := b.opts.heartbeatInterval()
	retry := min(interval, time.Second)
	t := time.NewTimer(interval)
	defer t.Stop()
	failing, fenced := false, false
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.ctx, interval)
		err := b.refresh(ctx)
		cancel()
		if b.ctx.Err() != nil {
			return
		}
		b.standing.Set(b.lapsed())
		next := interval
		switch {
		case errors.Is(err, registry.ErrClusterIDInUse):
			// Read again at each interval, said once.
			if !fenced {
				b.log.Error(err, "another cluster took this cluster id while its heartbeat was expired; writing nothing until that cluster's heartbeat expires")
			}
			fenced = true
		case err != nil:
			if errors.Is(err, errRetake) {
				next = interval
			} else {
				next = retry
			}
			b.log.Error(err, "cannot refresh heartbeat, retrying", "retryIn", next)
			failing = true
		case failing || fenced:
			b.log.Info("heartbeat refreshed again")
			failing, fenced = false, false
		}
		t.Reset(next)
	}
}
