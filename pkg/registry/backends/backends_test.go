package backends_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mcsd-io/mcsd/pkg/registry/backends"
	"github.com/mcsd-io/mcsd/pkg/registry/cloudmap"
	"github.com/mcsd-io/mcsd/pkg/registry/etcd"
)

func TestOpen(t *testing.T) {
	// No region from the environment or a shared config.
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_PROFILE", "")
	for _, tc := range []struct {
		url      string
		wantName string
		wantErr  string
	}{
		{url: "etcd://127.0.0.1:2379", wantName: etcd.Name},
		{url: "etcds://a:2379,b:2379/prefix", wantName: etcd.Name},
		{url: "cloudmap://?region=eu-west-1&poll-interval=5s", wantName: cloudmap.Name},
		{url: "etcd://", wantErr: "names no etcd endpoint"},
		{url: "zk://127.0.0.1", wantErr: `unknown scheme "zk" (known: cloudmap, etcd, etcds)`},
		{url: "cloudmap://?rate=RegisterInstance:x:1", wantErr: "rate="},
		{url: "cloudmap://?poll-interval=5s", wantErr: "no aws region"},
	} {
		b, err := backends.Open(tc.url, backends.Settings{})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.url, err)
		case tc.wantErr == "" && (b.Name != tc.wantName || b.Open == nil || b.OpenWatcher == nil):
			t.Errorf("%q: backend %q, open %v, watcher %v; want %q with both", tc.url, b.Name, b.Open != nil, b.OpenWatcher != nil, tc.wantName)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want one containing %q", tc.url, err, tc.wantErr)
		}
	}
}

func TestParseURL(t *testing.T) {
	u := mustParse(t, "etcds://a:2379,b:2379/team/")
	got, err := etcd.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(etcd.Options{Endpoints: []string{"https://a:2379", "https://b:2379"}, Prefix: "/team"}, got); d != "" {
		t.Errorf("etcd.ParseURL (-want +got):\n%s", d)
	}

	cm, err := cloudmap.ParseURL(mustParse(t, "cloudmap://?region=eu-west-1&endpoint=http://127.0.0.1:5000&poll-interval=3s&sweep-interval=7m&cleanup-empty=true&rate=RegisterInstance:5:10"))
	if err != nil {
		t.Fatal(err)
	}
	want := cloudmap.Options{
		Region: "eu-west-1", Endpoint: "http://127.0.0.1:5000", PollInterval: 3 * time.Second, SweepInterval: 7 * time.Minute,
		CleanupEmpty: true, RateLimits: cloudmap.DefaultRateLimits(),
	}
	want.RateLimits["RegisterInstance"] = cloudmap.RateLimit{QPS: 5, Burst: 10}
	if d := cmp.Diff(want, cm, cmpopts.IgnoreUnexported(cloudmap.Options{})); d != "" {
		t.Errorf("cloudmap.ParseURL (-want +got):\n%s", d)
	}
	if cm, err := cloudmap.ParseURL(mustParse(t, "cloudmap://?region=eu-west-1&cleanup-empty=True")); err != nil || !cm.CleanupEmpty {
		t.Errorf("cleanup-empty=True: %v, CleanupEmpty %v, want true", err, cm.CleanupEmpty)
	}
	// An option it does not know, or no longer has, is an error, not
	// ignored.
	for raw, want := range map[string]string{
		"cloudmap://?region=eu-west-1&pol-interval=3s":  `unknown option "pol-interval"`,
		"cloudmap://?region=eu-west-1&list-interval=5s": "list-interval is gone",
		"cloudmap://?region=eu-west-1&cleanup-empty=ja": `cleanup-empty: "ja" is not true or false`,
	} {
		if _, err := cloudmap.ParseURL(mustParse(t, raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cloudmap.ParseURL(%s) = %v, want an error saying %q", raw, err, want)
		}
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
