package cloudmap

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// API is the part of the Cloud Map SDK client the backend uses;
// *servicediscovery.Client implements it.
type API interface {
	ListNamespaces(ctx context.Context, in *sd.ListNamespacesInput, optFns ...func(*sd.Options)) (*sd.ListNamespacesOutput, error)
	ListServices(ctx context.Context, in *sd.ListServicesInput, optFns ...func(*sd.Options)) (*sd.ListServicesOutput, error)
	ListInstances(ctx context.Context, in *sd.ListInstancesInput, optFns ...func(*sd.Options)) (*sd.ListInstancesOutput, error)
	CreateHttpNamespace(ctx context.Context, in *sd.CreateHttpNamespaceInput, optFns ...func(*sd.Options)) (*sd.CreateHttpNamespaceOutput, error)
	CreateService(ctx context.Context, in *sd.CreateServiceInput, optFns ...func(*sd.Options)) (*sd.CreateServiceOutput, error)
	DeleteNamespace(ctx context.Context, in *sd.DeleteNamespaceInput, optFns ...func(*sd.Options)) (*sd.DeleteNamespaceOutput, error)
	DeleteService(ctx context.Context, in *sd.DeleteServiceInput, optFns ...func(*sd.Options)) (*sd.DeleteServiceOutput, error)
	GetOperation(ctx context.Context, in *sd.GetOperationInput, optFns ...func(*sd.Options)) (*sd.GetOperationOutput, error)
	RegisterInstance(ctx context.Context, in *sd.RegisterInstanceInput, optFns ...func(*sd.Options)) (*sd.RegisterInstanceOutput, error)
	DeregisterInstance(ctx context.Context, in *sd.DeregisterInstanceInput, optFns ...func(*sd.Options)) (*sd.DeregisterInstanceOutput, error)
	DiscoverInstances(ctx context.Context, in *sd.DiscoverInstancesInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesOutput, error)
	DiscoverInstancesRevision(ctx context.Context, in *sd.DiscoverInstancesRevisionInput, optFns ...func(*sd.Options)) (*sd.DiscoverInstancesRevisionOutput, error)
	ListOperations(ctx context.Context, in *sd.ListOperationsInput, optFns ...func(*sd.Options)) (*sd.ListOperationsOutput, error)
	GetInstance(ctx context.Context, in *sd.GetInstanceInput, optFns ...func(*sd.Options)) (*sd.GetInstanceOutput, error)
	GetService(ctx context.Context, in *sd.GetServiceInput, optFns ...func(*sd.Options)) (*sd.GetServiceOutput, error)
	GetNamespace(ctx context.Context, in *sd.GetNamespaceInput, optFns ...func(*sd.Options)) (*sd.GetNamespaceOutput, error)
	UpdateService(ctx context.Context, in *sd.UpdateServiceInput, optFns ...func(*sd.Options)) (*sd.UpdateServiceOutput, error)
}

var _ API = (*sd.Client)(nil)

// errNoRegion: neither the options nor the SDK's default chain give a
// region.
var errNoRegion = errors.New("no aws region: set region= in the registry URL, AWS_REGION, or a region in the shared config")

// CheckRegion reports an error when neither opts nor the SDK's default
// chain (AWS_REGION, the shared config) give a region: said when mcsd
// starts, not once it has its identity and leads.
func CheckRegion(ctx context.Context, opts Options) error {
	if opts.Region != "" {
		return nil
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("load aws config: %w", err)
	}
	if cfg.Region == "" {
		return errNoRegion
	}
	return nil
}

// NewClient builds the Cloud Map client New uses: the SDK's default
// configuration chain, the region, credentials and endpoint of opts, and a
// retryer that retries throttling errors, 5xx and network errors with
// exponential backoff and jitter, without a client-side retry quota (which
// would turn a long throttling episode into failures).
func NewClient(ctx context.Context, opts Options) (*sd.Client, error) {
	var loadOpts []func(*config.LoadOptions) error
	if opts.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(opts.Region))
	}
	if opts.Credentials != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(opts.Credentials))
	}
	loadOpts = append(loadOpts, config.WithRetryer(func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = opts.MaxAttempts
			o.MaxBackoff = opts.MaxBackoff
			o.RateLimiter = ratelimit.None
		})
	}))
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load aws config: %w", err)
	}
	if cfg.Region == "" {
		return nil, errNoRegion
	}
	return sd.NewFromConfig(cfg, func(o *sd.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
			o.APIOptions = append(o.APIOptions, disableHostPrefix)
		}
	}), nil
}

// disableHostPrefix stops the SDK from prepending "data-" to the endpoint's
// host for DiscoverInstances and DiscoverInstancesRevision, which a local
// endpoint (http://127.0.0.1:port) cannot take.
func disableHostPrefix(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("mcsdDisableHostPrefix",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(smithyhttp.DisableEndpointHostPrefix(ctx, true), in)
		}), middleware.Before)
}
