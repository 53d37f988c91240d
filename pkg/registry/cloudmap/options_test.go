package cloudmap

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sd "github.com/aws/aws-sdk-go-v2/service/servicediscovery"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func TestOptions(t *testing.T) {
	var o Options
	o.Identity = testID
	o.RateLimits = map[string]RateLimit{OpRegisterInstance: {QPS: 1, Burst: 1}}
	o.Default()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if o.TTL != DefaultTTL || o.PollInterval != DefaultPollInterval || o.SystemNamespace != DefaultSystemNamespace {
		t.Errorf("defaults not applied: %+v", o)
	}
	if o.RateLimits[OpRegisterInstance].QPS != 1 || o.RateLimits[OpDiscoverInstances].QPS == 0 {
		t.Errorf("rate limits not merged with defaults: %v", o.RateLimits)
	}

	for _, tc := range []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"no cluster", func(o *Options) { o.Identity.Cluster = "" }, "cluster id"},
		{"bad endpoint", func(o *Options) { o.Endpoint = "localhost:5000" }, "endpoint"},
		{"short ttl", func(o *Options) { o.TTL = time.Millisecond }, "ttl"},
		{"sweep before poll", func(o *Options) { o.SweepInterval = time.Millisecond }, "sweep interval"},
		{"system namespace", func(o *Options) { o.SystemNamespace = "mcsd" }, "system namespace"},
		{"unknown op", func(o *Options) { o.RateLimits["Nope"] = RateLimit{QPS: 1, Burst: 1} }, "unknown operation"},
		{"zero burst", func(o *Options) { o.RateLimits[OpGetOperation] = RateLimit{QPS: 1} }, "GetOperation"},
		{"attempts", func(o *Options) { o.MaxAttempts = -1 }, "attempts"},
	} {
		o := Options{Identity: testID}
		o.Default()
		tc.mod(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error about %q", tc.name, err, tc.want)
		}
	}

	// A watcher needs the clusterset only.
	w := Options{Identity: registry.Identity{ClusterSet: testID.ClusterSet}}
	w.Default()
	if err := w.ValidateWatcher(); err != nil {
		t.Errorf("ValidateWatcher() without a cluster = %v", err)
	}
	w.Identity.ClusterSet = ""
	if err := w.ValidateWatcher(); err == nil || !strings.Contains(err.Error(), "clusterset id") {
		t.Errorf("ValidateWatcher() without a clusterset = %v, want an error about the clusterset id", err)
	}
}

// TestEndpointOverrideDisablesHostPrefix checks that DiscoverInstances and
// DiscoverInstancesRevision reach an overridden endpoint as they are, without
// the "data-" host prefix.
func TestEndpointOverrideDisablesHostPrefix(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = w.Write([]byte(`{"InstancesRevision": 7, "Instances": []}`))
	}))
	defer srv.Close()
	opts := Options{
		Identity:    registry.Identity{ClusterSet: "s", Cluster: "c"},
		Region:      "us-east-1",
		Endpoint:    srv.URL,
		Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""),
	}
	opts.Default()
	client, err := NewClient(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev, err := client.DiscoverInstancesRevision(ctx, &sd.DiscoverInstancesRevisionInput{NamespaceName: aws.String("ns"), ServiceName: aws.String("svc")})
	if err != nil {
		t.Fatalf("DiscoverInstancesRevision against %s: %v", srv.URL, err)
	}
	if aws.ToInt64(rev.InstancesRevision) != 7 {
		t.Errorf("revision = %d", aws.ToInt64(rev.InstancesRevision))
	}
	if _, err := client.DiscoverInstances(ctx, &sd.DiscoverInstancesInput{NamespaceName: aws.String("ns"), ServiceName: aws.String("svc")}); err != nil {
		t.Fatalf("DiscoverInstances: %v", err)
	}
	if calls.Load() != 2 {
		t.Errorf("server got %d calls, want 2", calls.Load())
	}
}

func TestErrorClassification(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"` + r.URL.Query().Get("x") + r.Header.Get("X-Test-Error") + `","message":"m"}`))
	}))
	defer srv.Close()
	opts := Options{Identity: testID, Region: "us-east-1", Endpoint: srv.URL, Credentials: credentials.NewStaticCredentialsProvider("a", "b", ""), MaxAttempts: 1}
	opts.Default()
	client, err := NewClient(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	call := func(code string) error {
		_, err := client.ListServices(context.Background(), &sd.ListServicesInput{}, func(o *sd.Options) {
			o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue("X-Test-Error", code))
		})
		return err
	}
	if err := call("AccessDeniedException"); !isAccessDenied(err) || isNotFound(err) {
		t.Errorf("AccessDeniedException: %v", err)
	}
	if err := call("ServiceNotFound"); !isNotFound(err) || isAccessDenied(err) {
		t.Errorf("ServiceNotFound: %v", err)
	}
	if err := call("ResourceInUse"); !isInUse(err) {
		t.Errorf("ResourceInUse: %v", err)
	}
}
