package cloudmap

import (
	"context"
	"fmt"
	"slices"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"golang.org/x/time/rate"
)

// purposeKey is the context key of the purpose of the calls made with it:
// purposeFeed, purposeSweep.
type purposeKey struct{}

const (
	purposeFeed  = "feed"
	purposeSweep = "sweep"
)

// withPurpose marks the calls made with ctx as made for purpose: their
// User-Agent ends in "mcsd/<purpose>", so that CloudTrail (and the
// benchmark's counting proxy) tell the change feed's calls from the
// sweep's.
func withPurpose(ctx context.Context, purpose string) context.Context {
	return context.WithValue(ctx, purposeKey{}, purpose)
}

// tagged adds the User-Agent of ctx's purpose to optFns.
func tagged(ctx context.Context, optFns []func(*sd.Options)) []func(*sd.Options) {
	purpose, ok := ctx.Value(purposeKey{}).(string)
	if !ok {
		return optFns
	}
	return append(slices.Clip(optFns), func(o *sd.Options) {
		o.APIOptions = append(o.APIOptions, awsmiddleware.AddUserAgentKeyValue("mcsd", purpose))
	})
}

// limitedAPI is an API that waits for its operation's rate limiter before
// each call. It is an API itself, so the SDK's paginators work over it.
type limitedAPI struct {
	api      API
	limiters map[string]*rate.Limiter
}

var _ API = (*limitedAPI)(nil)

func newLimitedAPI(api API, limits map[string]RateLimit) *limitedAPI {
	l := &limitedAPI{api: api, limiters: make(map[string]*rate.Limiter, len(limits))}
	for op, lim := range limits {
		l.limiters[op] = rate.NewLimiter(rate.Limit(lim.QPS), lim.Burst)
	}
	return l
}

func (l *limitedAPI) wait(ctx context.Context, op string) error {
	lim, ok := l.limiters[op]
	if !ok {
		return nil
	}
	if err := lim.Wait(ctx); err != nil {
		return fmt.Errorf("%s rate limit: %w", op, err)
	}
	return nil
}

func (l *limitedAPI) ListNamespaces(ctx context.Context, in *sd.ListNamespacesInput, optFns ...func(*sd.Options)) (*sd.ListNamespacesOutput, error) {
	if err := l.wait(ctx, OpListNamespaces); err != nil {
		return nil, err
	}
	return l.api.ListNamespaces(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) ListServices(ctx context.Context, in *sd.ListServicesInput, optFns ...func(*sd.Options)) (*sd.ListServicesOutput, error) {
	if err := l.wait(ctx, OpListServices); err != nil {
		return nil, err
	}
	return l.api.ListServices(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) ListInstances(ctx context.Context, in *sd.ListInstancesInput, optFns ...func(*sd.Options)) (*sd.ListInstancesOutput, error) {
	if err := l.wait(ctx, OpListInstances); err != nil {
		return nil, err
	}
	return l.api.ListInstances(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) CreateHttpNamespace(ctx context.Context, in *sd.CreateHttpNamespaceInput, optFns ...func(*sd.Options)) (*sd.CreateHttpNamespaceOutput, error) { //nolint:revive // the SDK method's name
	if err := l.wait(ctx, OpCreateHTTPNamespace); err != nil {
		return nil, err
	}
	return l.api.CreateHttpNamespace(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) CreateService(ctx context.Context, in *sd.CreateServiceInput, optFns ...func(*sd.Options)) (*sd.CreateServiceOutput, error) {
	if err := l.wait(ctx, OpCreateService); err != nil {
		return nil, err
	}
	return l.api.CreateService(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) DeleteNamespace(ctx context.Context, in *sd.DeleteNamespaceInput, optFns ...func(*sd.Options)) (*sd.DeleteNamespaceOutput, error) {
	if err := l.wait(ctx, OpDeleteNamespace); err != nil {
		return nil, err
	}
	return l.api.DeleteNamespace(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) DeleteService(ctx context.Context, in *sd.DeleteServiceInput, optFns ...func(*sd.Options)) (*sd.DeleteServiceOutput, error) {
	if err := l.wait(ctx, OpDeleteService); err != nil {
		return nil, err
	}
	return l.api.DeleteService(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) UpdateService(ctx context.Context, in *sd.UpdateServiceInput, optFns ...func(*sd.Options)) (*sd.UpdateServiceOutput, error) {
	if err := l.wait(ctx, OpUpdateService); err != nil {
		return nil, err
	}
	return l.api.UpdateService(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) GetOperation(ctx context.Context, in *sd.GetOperationInput, optFns ...func(*sd.Options)) (*sd.GetOperationOutput, error) {
	if err := l.wait(ctx, OpGetOperation); err != nil {
		return nil, err
	}
	return l.api.GetOperation(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) RegisterInstance(ctx context.Context, in *sd.RegisterInstanceInput, optFns ...func(*sd.Options)) (*sd.RegisterInstanceOutput, error) {
	if err := l.wait(ctx, OpRegisterInstance); err != nil {
		return nil, err
	}
	return l.api.RegisterInstance(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) DeregisterInstance(ctx context.Context, in *sd.DeregisterInstanceInput, optFns ...func(*sd.Options)) (*sd.DeregisterInstanceOutput, error) {
	if err := l.wait(ctx, OpDeregisterInstance); err != nil {
		return nil, err
	}
	return l.api.DeregisterInstance(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) DiscoverInstances(ctx context.Context, in *sd.DiscoverInstancesInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesOutput, error) {
	if err := l.wait(ctx, OpDiscoverInstances); err != nil {
		return nil, err
	}
	return l.api.DiscoverInstances(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) DiscoverInstancesRevision(ctx context.Context, in *sd.DiscoverInstancesRevisionInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesRevisionOutput, error) {
	if err := l.wait(ctx, OpDiscoverInstancesRevision); err != nil {
		return nil, err
	}
	return l.api.DiscoverInstancesRevision(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) ListOperations(ctx context.Context, in *sd.ListOperationsInput, optFns ...func(*sd.Options)) (*sd.ListOperationsOutput, error) {
	if err := l.wait(ctx, OpListOperations); err != nil {
		return nil, err
	}
	return l.api.ListOperations(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) GetInstance(ctx context.Context, in *sd.GetInstanceInput, optFns ...func(*sd.Options)) (*sd.GetInstanceOutput, error) {
	if err := l.wait(ctx, OpGetInstance); err != nil {
		return nil, err
	}
	return l.api.GetInstance(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) GetService(ctx context.Context, in *sd.GetServiceInput, optFns ...func(*sd.Options)) (*sd.GetServiceOutput, error) {
	if err := l.wait(ctx, OpGetService); err != nil {
		return nil, err
	}
	return l.api.GetService(ctx, in, tagged(ctx, optFns)...)
}

func (l *limitedAPI) GetNamespace(ctx context.Context, in *sd.GetNamespaceInput, optFns ...func(*sd.Options)) (*sd.GetNamespaceOutput, error) {
	if err := l.wait(ctx, OpGetNamespace); err != nil {
		return nil, err
	}
	return l.api.GetNamespace(ctx, in, tagged(ctx, optFns)...)
}
