package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
)

// The change feed. Cloud Map records every RegisterInstance and
// DeregisterInstance, whoever makes it (mcsd, the AWS controller, anyone),
// as an operation of the account and region. Each poll lists the
// successful instance operations whose UpdateDate falls in its window (one
// ListOperations, one more per 100 operations), asks GetOperation which
// service and instance each operation not seen before changed, and reads
// only those services: its cost follows the changes, not the services.
//
// The window starts FeedOverlap before the last poll, and ends feedSkew
// after now, deduplicated by operation id: operations listed late and
// clock skew between the cluster and Cloud Map are covered. Once an
// operation's UpdateDate is known (Cloud Map's clock), windows start from
// the latest one instead of the local clock, so a clock ahead of Cloud
// Map's misses nothing either. What the feed still misses (an operation
// listed later than the overlap, one Cloud Map no longer lists) the sweep
// repairs.

// feedSkew is how far the local clock may be off Cloud Map's: the window
// ends this long after now, and the first one starts this long before.
const feedSkew = 5 * time.Minute

// primeFeed lists the operations of the last feedSkew and takes them as
// handled: the sweep that follows reads what they changed. Two kinds are
// the exception, as the sweep may read their services before Cloud Map's
// discovery data shows what they did, and no later operation would have
// them read again before the next sweep: the backend's own, and the
// others' of the last propagation by Cloud Map's clock (the listing's
// Date). The next poll judges these as any new operation of the feed (its
// services read again until they show it, watcher.settle): the backend's
// own at no call, their targets known; the others' at a GetOperation each,
// a minute of the feed's own cost. A listing without a Date leaves the
// others handled, as the sweep reads them.
func (w *watcher) primeFeed(ctx context.Context) error {
	b := w.b
	start := b.now()
	ids, served, err := w.listOperations(ctx, start.Add(-feedSkew-b.opts.FeedOverlap), start.Add(feedSkew))
	if err != nil {
		return err
	}
	recent := map[string]bool{}
	if !served.IsZero() {
		// The Date is whole seconds; the filter too (listOperations).
		late, _, err := w.listOperations(ctx, served.Add(-propagation-time.Second), served.Add(feedSkew))
		if err != nil {
			return err
		}
		for _, id := range late {
			recent[id] = true
		}
	}
	for _, id := range ids {
		if t, ok := b.ownOp(id); ok {
			w.ops[id] = &feedOp{target: t}
			continue
		}
		if recent[id] {
			continue // new to the next poll
		}
		w.ops[id] = &feedOp{handled: true}
	}
	w.feedFrom = start
	return nil
}

// pollFeed reads the services that the operations new since the last poll
// changed. An error leaves the operations not handled, for the next poll.
func (w *watcher) pollFeed(ctx context.Context) error {
	b := w.b
	start := b.now()
	// The latest operation known before this listing: every operation up
	// to it is listed now, so the next window may start there. The latest
	// known at the next poll may be later than what this one lists (the
	// backend's own writes meanwhile), so it is taken now.
	latest := b.latestOperation()
	// Until an operation's UpdateDate tells Cloud Map's time, the local
	// clock may be ahead of it by up to feedSkew.
	from := w.feedFrom.Add(-feedSkew)
	if !w.feedLatest.IsZero() {
		from = w.feedLatest
	}
	// A local clock behind Cloud Map's: the window reaches past the latest
	// operation known.
	to := start
	if latest.After(to) {
		to = latest
	}
	ids, _, err := w.listOperations(ctx, from.Add(-b.opts.FeedOverlap), to.Add(feedSkew))
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	var lookup []string
	for _, id := range ids {
		listed[id] = true
		if w.ops[id] != nil {
			continue
		}
		if t, ok := b.ownOp(id); ok {
			w.ops[id] = &feedOp{target: t}
			continue
		}
		lookup = append(lookup, id)
	}
	if err := w.getOperations(ctx, lookup); err != nil {
		return err
	}

	// What to read: each service once, the records one by one.
	var read []string
	expect := map[string]map[string]wanted{} // by service, instance
	var owners prefixSet                     // made when an operation needs it
	now := b.now()
	// recordIDs holds the records to read, and whether a registration of
	// each was listed.
	recordIDs := map[string]bool{}
	noteRecord := func(t opTarget) {
		ref := recordRef(t.service, t.instance)
		recordIDs[ref] = recordIDs[ref] || !t.deregister
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(w.ops)) {
		op := w.ops[id]
		if op.handled || op.target.service == "" {
			op.handled = true
			continue
		}
		switch t := op.target; {
		case b.isRecordsService(t.service):
			noteRecord(t)
		default:
			c, err := w.feedService(ctx, t.service)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if c == nil {
				continue
			}
			if c.svc.NS.Name == b.opts.SystemNamespace {
				noteRecord(t)
				continue
			}
			read = append(read, t.service)
			w.noteBaseline(op, now)
			if owners == nil {
				owners = w.ownerPrefixes()
			}
			if owners.has(t.instance) {
				// Another clusterset's instance (or another tool's) is
				// never read: DiscoverInstances is filtered on this one.
				expectInstance(expect, op, now)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	read = append(read, w.unsettledServices(expect)...)
	slices.Sort(read)
	read = slices.Compact(read)
	if err := w.readServices(ctx, read, false); err != nil {
		return err
	}
	w.settle(expect)
	for _, ref := range w.unseenRecords() {
		recordIDs[ref] = true
	}
	records := slices.Sorted(maps.Keys(recordIDs))
	if w.recordsMoved {
		if err := w.readAllRecords(ctx); err != nil {
			return err
		}
		w.recordsMoved = false
	} else if err := w.readRecords(ctx, records, recordIDs); err != nil {
		return err
	}
	// A known cluster's heartbeat is read every TTL/3 anyway: only a new
	// cluster's is read at once.
	if w.newCluster(read, records) {
		if err := w.readHeartbeats(ctx); err != nil {
			return err
		}
	}
	// Everything named was read; operations that left the window cannot
	// come back.
	for id, op := range w.ops {
		op.handled = true
		if !listed[id] {
			delete(w.ops, id)
		}
	}
	w.feedFrom = start
	w.feedLatest = latest
	return nil
}

// feedService returns the cache of the service of id, adding it when it
// can hold exports, or nil when it cannot (or no longer exists). A service
// of the system namespace is returned with no cache entry.
func (w *watcher) feedService(ctx context.Context, id string) (*serviceCache, error) {
	if c := w.services[id]; c != nil {
		return c, nil
	}
	b := w.b
	svc, ok, err := b.resolveService(ctx, id)
	if isAccessDenied(err) {
		// Outside what mcsd's policy lets it read, as the sweep and the
		// reads skip: no service mcsd imports from. Its operation is
		// handled; an error would stop the feed at it, poll after poll.
		w.log.V(1).Info("skipping a cloud map service mcsd may not read", "service", id, "reason", err.Error())
		return nil, nil
	}
	if err != nil || !ok {
		return nil, err
	}
	if svc.NS.Name == b.opts.SystemNamespace {
		// Only the records services hold instances there.
		if isRecordsName(svc.Name) {
			if known := b.systemService(svc.Name).ID; known != svc.ID {
				// A name is unique in a namespace: the records service
				// known was deleted, and this one made in its place.
				// Its records are read whole, not by the old id. A
				// new one's are read by the operations that wrote
				// them.
				if known != "" {
					w.log.Info("records service created again", "service", svc.ID, "previous", known)
					b.dir.dropService(known)
					w.recordsMoved = true
				}
				b.setSystemService(svc)
			}
			return &serviceCache{svc: svc}, nil
		}
		return nil, nil
	}
	if !svc.NS.usable() || !validName(svc.NS.Name) || !validName(svc.Name) {
		return nil, nil
	}
	c := &serviceCache{svc: svc, revision: -1, added: b.now()}
	w.services[id] = c
	return c, nil
}

// getOperations asks Cloud Map what each operation of ids changed, a few
// at a time, and records it in w.ops.
func (w *watcher) getOperations(ctx context.Context, ids []string) error {
	b := w.b
	var mu sync.Mutex
	return b.each(ctx, len(ids), func(ctx context.Context, i int) error {
		id := ids[i]
		out, err := b.api.GetOperation(ctx, &sd.GetOperationInput{OperationId: aws.String(id)})
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errorCode(err) == "OperationNotFound":
			w.ops[id] = &feedOp{handled: true}
		case err != nil:
			return fmt.Errorf("get operation %s: %w", id, err)
		case out.Operation != nil:
			op := out.Operation
			b.sawOp(op.UpdateDate)
			w.ops[id] = &feedOp{target: opTarget{
				service:    op.Targets[string(types.OperationTargetTypeService)],
				instance:   op.Targets[string(types.OperationTargetTypeInstance)],
				deregister: op.Type == types.OperationTypeDeregisterInstance,
			}}
		}
		return nil
	})
}

// listOperations lists the ids of the successful instance operations whose
// UpdateDate is between from and to, in Unix seconds (what the filter
// takes), widened to whole seconds. It returns them with Cloud Map's time
// of its first answer (its Date header; zero without one).
func (w *watcher) listOperations(ctx context.Context, from, to time.Time) ([]string, time.Time, error) {
	in := &sd.ListOperationsInput{
		MaxResults: aws.Int32(100),
		Filters: []types.OperationFilter{
			{
				Name:      types.OperationFilterNameUpdateDate,
				Condition: types.FilterConditionBetween,
				Values:    []string{strconv.FormatInt(from.Unix(), 10), strconv.FormatInt(to.Unix()+1, 10)},
			},
			{
				Name:      types.OperationFilterNameStatus,
				Condition: types.FilterConditionEq,
				Values:    []string{string(types.OperationStatusSuccess)},
			},
			{
				Name:      types.OperationFilterNameType,
				Condition: types.FilterConditionIn,
				Values:    []string{string(types.OperationTypeRegisterInstance), string(types.OperationTypeDeregisterInstance)},
			},
		},
	}
	var ids []string
	var served time.Time
	p := sd.NewListOperationsPaginator(w.b.api, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("list operations: %w", err)
		}
		if t, ok := awsmiddleware.GetServerTime(page.ResultMetadata); ok && served.IsZero() {
			served = t
		}
		for _, op := range page.Operations {
			ids = append(ids, aws.ToString(op.Id))
		}
	}
	return ids, served, nil
}
