package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	"golang.org/x/sync/errgroup"
)

// discover reads the instances of svc that match query: DiscoverInstances
// returns at most 1,000 and has no pagination, so a service with more is
// read again with ListInstances, page by page, and filtered here.
func (r *reader) discover(ctx context.Context, svc service, query map[string]string) ([]instance, error) {
	insts, _, err := r.discoverRevision(ctx, svc, query)
	return insts, err
}

// discoverRevision is discover, with the service's instances revision that
// DiscoverInstances returns with them, -1 when unknown.
func (r *reader) discoverRevision(ctx context.Context, svc service, query map[string]string) ([]instance, int64, error) {
	out, err := r.api.DiscoverInstances(ctx, &sd.DiscoverInstancesInput{
		NamespaceName:   aws.String(svc.NS.HTTPName),
		ServiceName:     aws.String(svc.Name),
		MaxResults:      aws.Int32(discoverMax),
		QueryParameters: query,
		HealthStatus:    types.HealthStatusFilterAll,
	})
	if err != nil {
		return nil, -1, fmt.Errorf("discover instances of %s/%s: %w", svc.NS.Name, svc.Name, err)
	}
	if len(out.Instances) < discoverMax {
		revision := int64(-1)
		if out.InstancesRevision != nil {
			revision = *out.InstancesRevision
		}
		insts := make([]instance, 0, len(out.Instances))
		for _, in := range out.Instances {
			insts = append(insts, instance{ID: aws.ToString(in.InstanceId), Attrs: in.Attributes})
		}
		return insts, revision, nil
	}
	var insts []instance
	p := sd.NewListInstancesPaginator(r.api, &sd.ListInstancesInput{ServiceId: aws.String(svc.ID), MaxResults: aws.Int32(100)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, -1, fmt.Errorf("list instances of %s/%s: %w", svc.NS.Name, svc.Name, err)
		}
	next:
		for _, in := range page.Instances {
			for k, v := range query {
				if in.Attributes[k] != v {
					continue next
				}
			}
			insts = append(insts, instance{ID: aws.ToString(in.Id), Attrs: in.Attributes})
		}
	}
	return insts, -1, nil
}

// discoverMax is the most instances one DiscoverInstances call returns.
const discoverMax = 1000

// parallel runs do for 0..n-1 with at most Concurrency at once, calls ok
// (serially) for each that succeeded, and returns the errors.
func (b *Backend) parallel(ctx context.Context, n int, do func(context.Context, int) error, ok func(int)) error {
	var mu sync.Mutex
	return b.each(ctx, n, func(ctx context.Context, i int) error {
		if err := do(ctx, i); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		ok(i)
		return nil
	})
}

// each runs do for 0 to n-1, Concurrency at a time, and returns their
// errors joined.
func (r *reader) each(ctx context.Context, n int, do func(context.Context, int) error) error {
	var mu sync.Mutex
	var errs []error
	var g errgroup.Group
	g.SetLimit(r.opts.Concurrency)
	for i := range n {
		g.Go(func() error {
			if err := do(ctx, i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil // all run: their errors are joined
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}
