package cloudmap

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	"github.com/aws/aws-sdk-go-v2/service/servicediscovery/types"

	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap/mototest"
)

// ownMotoClient starts a moto server of the test's own, and returns a client
// of it that tries a call at most three times, 100 ms apart at the most. A
// client that tried once failed now and then with "use of closed network
// connection" while reading a response: net/http's race on a keep-alive
// connection that the server closes, which the SDK retries
// (aws/aws-sdk-go-v2#2737).
func ownMotoClient(t *testing.T) *sd.Client {
	t.Helper()
	srv := mototest.Start(t)
	api, err := NewClient(t.Context(), Options{Region: mototest.Region, Endpoint: srv.URL, Credentials: mototest.Credentials,
		MaxAttempts: 3, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// The patched moto records instance operations with their namespace and
// service and lists operations with Cloud Map's filters and paging
// (hack/moto/cloudmap_server.py, deviation 6): what a change feed built on
// ListOperations relies on.
func TestMotoListOperations(t *testing.T) {
	ctx := context.Background()
	api := ownMotoClient(t)
	nsID, nsOpID := createHTTPNamespace(t, api, "ops")
	var services []string
	for _, name := range []string{"a", "b"} {
		out, err := api.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String(name), NamespaceId: aws.String(nsID)})
		if err != nil {
			t.Fatal(err)
		}
		services = append(services, aws.ToString(out.Service.Id))
	}
	register := func(svc, id string) string {
		out, err := api.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: aws.String(svc), InstanceId: aws.String(id),
			Attributes: map[string]string{"AWS_INSTANCE_IPV4": "10.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.OperationId)
	}
	regA1, regA2, regB1 := register(services[0], "a1"), register(services[0], "a2"), register(services[1], "b1")
	dereg, err := api.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: aws.String(services[0]), InstanceId: aws.String("a1")})
	if err != nil {
		t.Fatal(err)
	}
	deregA1 := aws.ToString(dereg.OperationId)

	got, err := api.GetOperation(ctx, &sd.GetOperationInput{OperationId: aws.String(regB1)})
	if err != nil {
		t.Fatal(err)
	}
	if tg := got.Operation.Targets; tg["NAMESPACE"] != nsID || tg["SERVICE"] != services[1] || tg["INSTANCE"] != "b1" {
		t.Errorf("targets of RegisterInstance: %v", tg)
	}

	list := func(max int32, filters ...types.OperationFilter) []string {
		t.Helper()
		var ids []string
		in := &sd.ListOperationsInput{Filters: filters, MaxResults: aws.Int32(max)}
		for {
			out, err := api.ListOperations(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range out.Operations {
				ids = append(ids, aws.ToString(op.Id))
			}
			if out.NextToken == nil {
				return ids
			}
			in.NextToken = out.NextToken
		}
	}
	between := func(from, to time.Time) types.OperationFilter {
		return types.OperationFilter{Name: types.OperationFilterNameUpdateDate, Condition: types.FilterConditionBetween,
			Values: []string{strconv.FormatInt(from.Unix(), 10), strconv.FormatInt(to.Unix(), 10)}}
	}
	now := time.Now()
	cases := []struct {
		name    string
		max     int32
		filters []types.OperationFilter
		want    []string
	}{
		{"by service", 100, []types.OperationFilter{{Name: types.OperationFilterNameServiceId, Values: []string{services[0]}}}, []string{regA1, regA2, deregA1}},
		{"by type", 100, []types.OperationFilter{{Name: types.OperationFilterNameType, Condition: types.FilterConditionIn,
			Values: []string{string(types.OperationTypeDeregisterInstance)}}}, []string{deregA1}},
		{"by namespace and date, one a page", 1, []types.OperationFilter{
			{Name: types.OperationFilterNameNamespaceId, Values: []string{nsID}}, between(now.Add(-time.Minute), now.Add(time.Minute)),
			{Name: types.OperationFilterNameStatus, Condition: types.FilterConditionIn, Values: []string{"SUCCESS", "FAIL"}},
		}, []string{nsOpID, regA1, regA2, regB1, deregA1}},
		{"before any of them", 100, []types.OperationFilter{between(now.Add(-time.Hour), now.Add(-time.Minute))}, nil},
	}
	for _, tc := range cases {
		got := list(tc.max, tc.filters...)
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(tc.want))) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if all := list(2); !slices.Contains(all, nsOpID) || len(all) != 5 {
		t.Errorf("every operation, two a page: %d (%v)", len(all), all)
	}
	_, err = api.ListOperations(ctx, &sd.ListOperationsInput{Filters: []types.OperationFilter{
		{Name: types.OperationFilterNameUpdateDate, Values: []string{"1"}}}})
	if err == nil {
		t.Error("UPDATE_DATE with EQ: no error")
	}
}

// The patched moto returns with DiscoverInstances the revision that
// DiscoverInstancesRevision returns, and moves it on every registration and
// deregistration (hack/moto/cloudmap_server.py, deviation 2): a sweep skips
// the services whose revision the change feed read last.
func TestMotoDiscoverInstancesRevision(t *testing.T) {
	ctx := context.Background()
	api := ownMotoClient(t)
	nsID, _ := createHTTPNamespace(t, api, "rev")
	svc, err := api.CreateService(ctx, &sd.CreateServiceInput{Name: aws.String("a"), NamespaceId: aws.String(nsID)})
	if err != nil {
		t.Fatal(err)
	}
	revisions := func() (int64, int64) {
		t.Helper()
		d, err := api.DiscoverInstances(ctx, &sd.DiscoverInstancesInput{NamespaceName: aws.String("rev"), ServiceName: aws.String("a"), MaxResults: aws.Int32(10)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := api.DiscoverInstancesRevision(ctx, &sd.DiscoverInstancesRevisionInput{NamespaceName: aws.String("rev"), ServiceName: aws.String("a")})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToInt64(d.InstancesRevision), aws.ToInt64(r.InstancesRevision)
	}
	last := int64(-1)
	for i, write := range []func() error{
		func() error {
			_, err := api.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: svc.Service.Id, InstanceId: aws.String("x"), Attributes: map[string]string{"K": "1"}})
			return err
		},
		func() error {
			_, err := api.RegisterInstance(ctx, &sd.RegisterInstanceInput{ServiceId: svc.Service.Id, InstanceId: aws.String("y"), Attributes: map[string]string{"K": "1"}})
			return err
		},
		func() error {
			_, err := api.DeregisterInstance(ctx, &sd.DeregisterInstanceInput{ServiceId: svc.Service.Id, InstanceId: aws.String("y")})
			return err
		},
	} {
		if err := write(); err != nil {
			t.Fatal(err)
		}
		withInstances, alone := revisions()
		if withInstances != alone || alone <= last {
			t.Errorf("after write %d: DiscoverInstances revision %d, DiscoverInstancesRevision %d, want equal and above %d", i, withInstances, alone, last)
		}
		last = alone
	}
}
