package cloudmap

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"
	"github.com/aws/smithy-go"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/pkg/registry/internal/lifetime"
)

// namespace is a Cloud Map namespace mcsd can use.
type namespace struct {
	ID   string
	Name string
	// HTTPName is the name DiscoverInstances takes.
	HTTPName string
	Type     types.NamespaceType
	// Ours is set when mcsd created it.
	Ours bool
}

// service is a Cloud Map service.
type service struct {
	ID   string
	Name string
	NS   namespace
	Ours bool
	// Desc is the service's description when it was read (a heartbeat
	// service's is the heartbeat).
	Desc string
}

func newNamespace(s types.NamespaceSummary) namespace {
	ns := namespace{
		ID:       aws.ToString(s.Id),
		Name:     aws.ToString(s.Name),
		Type:     s.Type,
		Ours:     aws.ToString(s.Description) == createdBy,
		HTTPName: aws.ToString(s.Name),
	}
	if s.Properties != nil && s.Properties.HttpProperties != nil && aws.ToString(s.Properties.HttpProperties.HttpName) != "" {
		ns.HTTPName = aws.ToString(s.Properties.HttpProperties.HttpName)
	}
	return ns
}

// usable reports whether mcsd reads and writes Services in the namespace:
// HTTP namespaces and private DNS namespaces.
func (ns namespace) usable() bool {
	return ns.Type == types.NamespaceTypeHttp || ns.Type == types.NamespaceTypeDnsPrivate
}

// listNamespaces lists every namespace of the account and region.
func listNamespaces(ctx context.Context, api API) ([]namespace, error) {
	var out []namespace
	p := sd.NewListNamespacesPaginator(api, &sd.ListNamespacesInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list namespaces: %w", err)
		}
		for _, s := range page.Namespaces {
			out = append(out, newNamespace(s))
		}
	}
	return out, nil
}

// listServices lists the services of a namespace.
func listServices(ctx context.Context, api API, ns namespace) ([]service, error) {
	var out []service
	p := sd.NewListServicesPaginator(api, &sd.ListServicesInput{Filters: []types.ServiceFilter{{
		Name:      types.ServiceFilterNameNamespaceId,
		Values:    []string{ns.ID},
		Condition: types.FilterConditionEq,
	}}})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list services of namespace %s: %w", ns.Name, err)
		}
		for _, s := range page.Services {
			out = append(out, service{
				ID:   aws.ToString(s.Id),
				Name: aws.ToString(s.Name),
				NS:   ns,
				Ours: aws.ToString(s.Description) == createdBy,
				Desc: aws.ToString(s.Description),
			})
		}
	}
	return out, nil
}

// findNamespace lists the namespaces into the directory and returns the
// usable namespace called name, if there is one. An HTTP namespace is
// preferred to a private DNS one of the same name.
func (r *reader) findNamespace(ctx context.Context, name string) (namespace, bool, error) {
	all, err := listNamespaces(ctx, r.api)
	if err != nil {
		return namespace{}, false, err
	}
	for _, ns := range all {
		r.dir.addNamespace(ns)
	}
	var found namespace
	ok := false
	for _, ns := range all {
		if ns.Name != name {
			continue
		}
		if !ns.usable() {
			return namespace{}, false, fmt.Errorf("namespace %s is of type %s, mcsd needs HTTP or DNS_PRIVATE", name, ns.Type)
		}
		if !ok || ns.Type == types.NamespaceTypeHttp {
			found, ok = ns, true
		}
	}
	return found, ok, nil
}

// ensureNamespace returns the namespace called name, creating an HTTP
// namespace when there is none. A namespace in the directory costs no call.
func (b *Backend) ensureNamespace(ctx context.Context, name string) (namespace, error) {
	if ns, ok := b.dir.namespaceNamed(name); ok {
		return ns, nil
	}
	if ns, ok, err := b.findNamespace(ctx, name); err != nil || ok {
		return ns, err
	}
	out, err := b.api.CreateHttpNamespace(ctx, &sd.CreateHttpNamespaceInput{
		Name:        aws.String(name),
		Description: aws.String(createdBy),
	})
	switch {
	case errorCode(err) == "NamespaceAlreadyExists":
		// Another cluster created it meanwhile.
	case err != nil:
		return namespace{}, fmt.Errorf("create namespace %s: %w", name, err)
	default:
		if _, err := b.waitOperation(ctx, aws.ToString(out.OperationId)); err != nil {
			// A concurrent creation of the same name may fail the
			// operation; the namespace is then there all the same.
			b.log.V(1).Info("namespace creation did not succeed, looking it up", "namespace", name, "reason", err.Error())
		} else {
			b.log.Info("created namespace", "namespace", name)
		}
	}
	ns, ok, err := b.findNamespace(ctx, name)
	if err != nil {
		return namespace{}, err
	}
	if !ok {
		return namespace{}, fmt.Errorf("create namespace %s: not found after creation", name)
	}
	return ns, nil
}

// ensureService returns the Cloud Map service name of namespace nsName,
// creating the namespace and the service when they do not exist. What the
// directory knows costs no call: a new service in a known namespace costs
// its CreateService only. A namespace the directory holds that turns out
// deleted is looked up again, once.
func (b *Backend) ensureService(ctx context.Context, nsName, name string) (service, error) {
	for attempt := 0; ; attempt++ {
		svc, err := b.ensureServiceOnce(ctx, nsName, name)
		if attempt > 0 || errorCode(err) != "NamespaceNotFound" {
			return svc, err
		}
		b.log.V(1).Info("cloud map namespace gone, looking it up again", "namespace", nsName)
		if ns, ok := b.dir.namespaceNamed(nsName); ok {
			b.dir.dropNamespace(ns.ID)
		}
	}
}

func (b *Backend) ensureServiceOnce(ctx context.Context, nsName, name string) (service, error) {
	ns, err := b.ensureNamespace(ctx, nsName)
	if err != nil {
		return service{}, err
	}
	if s, ok := b.dir.serviceNamed(ns.ID, name); ok {
		return s, nil
	}
	find := func() (service, bool, error) {
		svcs, err := listServices(ctx, b.api, ns)
		if err != nil {
			return service{}, false, err
		}
		var found service
		ok := false
		for _, s := range svcs {
			b.dir.addService(s)
			if s.Name == name {
				found, ok = s, true
			}
		}
		return found, ok, nil
	}
	in := &sd.CreateServiceInput{
		Name:        aws.String(name),
		NamespaceId: aws.String(ns.ID),
		Description: aws.String(createdBy),
	}
	if ns.Type != types.NamespaceTypeHttp {
		// Discoverable through the API only: no DNS records, so that
		// instances without an address (the service record) are allowed.
		in.Type = types.ServiceTypeOptionHttp
	}
	out, err := b.api.CreateService(ctx, in)
	switch {
	case errorCode(err) == "ServiceAlreadyExists":
		// Created by someone else since the directory last learned of the
		// namespace's services.
		if s, ok, err := find(); err != nil || ok {
			return s, err
		}
		return service{}, fmt.Errorf("create service %s/%s: exists but not found", nsName, name)
	case err != nil:
		return service{}, fmt.Errorf("create service %s/%s: %w", nsName, name, err)
	}
	b.log.Info("created service", "namespace", nsName, "name", name)
	svc := service{ID: aws.ToString(out.Service.Id), Name: name, NS: ns, Ours: true, Desc: createdBy}
	b.dir.addService(svc)
	return svc, nil
}

// resolveService returns the service of id, from the directory or else
// from Cloud Map (GetService, and GetNamespace for a namespace the directory
// does not hold). It reports false for a service that no longer exists.
func (r *reader) resolveService(ctx context.Context, id string) (service, bool, error) {
	if svc, ok := r.dir.service(id); ok {
		return svc, true, nil
	}
	out, err := r.api.GetService(ctx, &sd.GetServiceInput{Id: aws.String(id)})
	if isNotFound(err) {
		return service{}, false, nil
	}
	if err != nil {
		return service{}, false, fmt.Errorf("get service %s: %w", id, err)
	}
	s := out.Service
	nsID := aws.ToString(s.NamespaceId)
	ns, ok := r.dir.namespace(nsID)
	if !ok {
		out, err := r.api.GetNamespace(ctx, &sd.GetNamespaceInput{Id: aws.String(nsID)})
		if isNotFound(err) {
			return service{}, false, nil
		}
		if err != nil {
			return service{}, false, fmt.Errorf("get namespace %s: %w", nsID, err)
		}
		n := out.Namespace
		ns = newNamespace(types.NamespaceSummary{Id: n.Id, Name: n.Name, Type: n.Type, Description: n.Description, Properties: n.Properties})
	}
	svc := service{ID: id, Name: aws.ToString(s.Name), NS: ns, Ours: aws.ToString(s.Description) == createdBy, Desc: aws.ToString(s.Description)}
	r.dir.addService(svc)
	return svc, true, nil
}

// directory is what a reader knows of Cloud Map's namespaces and services:
// what its sweeps listed, what its change feed looked up and what it
// created. Writes use it instead of listing; an entry that turns out stale
// is dropped and looked up again.
type directory struct {
	mu         sync.Mutex
	namespaces map[string]namespace
	services   map[string]dirService
}

type dirService struct {
	service
	// at is when the entry was added.
	at time.Time
}

func newDirectory() *directory {
	return &directory{namespaces: map[string]namespace{}, services: map[string]dirService{}}
}

func (d *directory) addNamespace(ns namespace) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.namespaces[ns.ID] = ns
}

func (d *directory) addService(svc service) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.namespaces[svc.NS.ID] = svc.NS
	d.services[svc.ID] = dirService{service: svc, at: time.Now()}
}

func (d *directory) dropService(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.services, id)
}

// dropNamespace forgets a namespace and its services.
func (d *directory) dropNamespace(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.namespaces, id)
	for sid, s := range d.services {
		if s.NS.ID == id {
			delete(d.services, sid)
		}
	}
}

// retain forgets the namespaces and services added before since that are
// not in the listing nss and svcs of a sweep that started at since.
func (d *directory) retain(since time.Time, nss map[string]bool, svcs map[string]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, s := range d.services {
		if !svcs[id] && s.at.Before(since) {
			delete(d.services, id)
		}
	}
	for id := range d.namespaces {
		if !nss[id] {
			used := false
			for _, s := range d.services {
				used = used || s.NS.ID == id
			}
			if !used {
				delete(d.namespaces, id)
			}
		}
	}
}

func (d *directory) service(id string) (service, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.services[id]
	return s.service, ok
}

func (d *directory) namespace(id string) (namespace, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ns, ok := d.namespaces[id]
	return ns, ok
}

// namespaceNamed returns the usable namespace called name; an HTTP
// namespace is preferred to a private DNS one, as findNamespace does.
func (d *directory) namespaceNamed(name string) (namespace, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var found namespace
	ok := false
	for _, ns := range d.namespaces {
		if ns.Name == name && ns.usable() && (!ok || ns.Type == types.NamespaceTypeHttp) {
			found, ok = ns, true
		}
	}
	return found, ok
}

func (d *directory) serviceNamed(nsID, name string) (service, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.services {
		if s.NS.ID == nsID && s.Name == name {
			return s.service, true
		}
	}
	return service{}, false
}

// errOperationFailed is returned for a Cloud Map operation that failed.
var errOperationFailed = errors.New("operation failed")

// waitOperation waits until the asynchronous operation id succeeds or fails,
// and returns its targets.
func (b *Backend) waitOperation(ctx context.Context, id string) (map[string]string, error) {
	if id == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.OperationTimeout)
	defer cancel()
	// Step keeps returning the cap once reached; the context bounds the
	// wait (wait.ExponentialBackoff would stop at the cap).
	poll := wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Cap: 2 * time.Second, Steps: math.MaxInt32}
	for {
		out, err := b.api.GetOperation(ctx, &sd.GetOperationInput{OperationId: aws.String(id)})
		if err != nil {
			return nil, fmt.Errorf("get operation %s: %w", id, err)
		}
		if op := out.Operation; op != nil {
			b.sawOp(op.UpdateDate)
			switch op.Status {
			case types.OperationStatusSuccess:
				return op.Targets, nil
			case types.OperationStatusFail:
				return nil, fmt.Errorf("operation %s %s: %s: %w", id, op.Type, aws.ToString(op.ErrorMessage), errOperationFailed)
			}
		}
		if !lifetime.Sleep(ctx, poll.Step()) {
			return nil, fmt.Errorf("wait for operation %s: %w", id, ctx.Err())
		}
	}
}

// errorCode is the Cloud Map error code of err, "" for other errors. Codes
// are compared rather than types: an operation's deserializer types only the
// errors its model lists.
func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// isNotFound reports whether err says a namespace, service or instance does
// not exist.
func isNotFound(err error) bool {
	switch errorCode(err) {
	case "NamespaceNotFound", "ServiceNotFound", "InstanceNotFound":
		return true
	}
	return false
}

// isAccessDenied reports whether err says the caller may not do this: a
// namespace outside what the IAM policy grants, which reads skip.
func isAccessDenied(err error) bool {
	switch errorCode(err) {
	case "AccessDeniedException", "AccessDenied":
		return true
	}
	return false
}

// refused reports whether err is Cloud Map's refusal of a request it did
// not carry out: invalid, over a limit, about a namespace or service that
// does not exist, or not authorized. Any other error, an answer or none,
// may follow an attempt that was carried out (the SDK retries throttled
// and failed requests, and the last attempt's error is the one returned).
func refused(err error) bool {
	if isAccessDenied(err) {
		return true
	}
	switch errorCode(err) {
	case "InvalidInput", "ResourceLimitExceeded", "NamespaceNotFound", "ServiceNotFound",
		"UnrecognizedClientException", "InvalidClientTokenId",
		"InvalidSignatureException", "IncompleteSignature", "MissingAuthenticationToken",
		"ExpiredToken", "ExpiredTokenException", "RequestExpired", "ValidationException":
		return true
	}
	return false
}

// isInUse reports whether err says a resource still holds others.
func isInUse(err error) bool { return errorCode(err) == "ResourceInUse" }
