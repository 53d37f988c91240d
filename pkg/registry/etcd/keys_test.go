package etcd

import (
	"testing"
	"time"

	"github.com/mcsd-io/mcsd/pkg/registry"
)

func TestKeys(t *testing.T) {
	k := newKeys("/mcsd/", "set1")
	web := registry.ServiceKey{Namespace: "shop", Name: "web"}
	for _, tc := range []struct {
		got, want string
	}{
		{k.clusters(), "/mcsd/set1/clusters/"},
		{k.cluster("a"), "/mcsd/set1/clusters/a/"},
		{k.alive("a"), "/mcsd/set1/clusters/a/alive"},
		{k.export("a", web), "/mcsd/set1/clusters/a/exports/shop/web"},
		{k.endpoints("a.example", web), "/mcsd/set1/clusters/a.example/endpoints/shop/web"},
	} {
		if tc.got != tc.want {
			t.Errorf("key %q, want %q", tc.got, tc.want)
		}
	}
}

func TestParseKey(t *testing.T) {
	k := newKeys("/mcsd", "set1")
	web := registry.ServiceKey{Namespace: "shop", Name: "web"}
	for _, tc := range []struct {
		key     string
		kind    keyKind
		cluster string
		svc     registry.ServiceKey
	}{
		{"/mcsd/set1/clusters/a/alive", kindAlive, "a", registry.ServiceKey{}},
		{"/mcsd/set1/clusters/a/exports/shop/web", kindExport, "a", web},
		{"/mcsd/set1/clusters/a/endpoints/shop/web", kindEndpoints, "a", web},
		{"/mcsd/set1/clusters/a/exports/shop", kindUnknown, "", registry.ServiceKey{}},
		{"/mcsd/set1/clusters/a/exports/shop/web/x", kindUnknown, "", registry.ServiceKey{}},
		{"/mcsd/set1/clusters/a/exports//web", kindUnknown, "", registry.ServiceKey{}},
		{"/mcsd/set1/clusters/a/other/shop/web", kindUnknown, "", registry.ServiceKey{}},
		{"/mcsd/set1/clusters//alive", kindUnknown, "", registry.ServiceKey{}},
		{"/mcsd/set10/clusters/a/alive", kindUnknown, "", registry.ServiceKey{}},
		{"/mcsd/set1/clusters/", kindUnknown, "", registry.ServiceKey{}},
	} {
		kind, cluster, svc := k.parse(tc.key)
		if kind != tc.kind || cluster != tc.cluster || svc != tc.svc {
			t.Errorf("parse(%q) = %v, %q, %v; want %v, %q, %v", tc.key, kind, cluster, svc, tc.kind, tc.cluster, tc.svc)
		}
	}
}

func TestOptions(t *testing.T) {
	valid := func() Options {
		return Options{Endpoints: []string{"http://127.0.0.1:2379"}, Identity: registry.Identity{ClusterSet: "set1", Cluster: "a"}}
	}
	for _, tc := range []struct {
		name   string
		modify func(*Options)
		ok     bool
	}{
		{"defaults", func(*Options) {}, true},
		{"no endpoints", func(o *Options) { o.Endpoints = nil }, false},
		{"no cluster", func(o *Options) { o.Identity.Cluster = "" }, false},
		{"slash in clusterset", func(o *Options) { o.Identity.ClusterSet = "a/b" }, false},
		{"short ttl", func(o *Options) { o.TTL = time.Second }, false},
		{"cert without key", func(o *Options) { o.CertFile = "tls.crt" }, false},
		{"a CA file that is not there", func(o *Options) { o.CAFile = "/nonexistent/ca.crt" }, false},
		{"negative interval", func(o *Options) { o.HealthInterval = -time.Second }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.modify(&o)
			o.Default()
			if err := o.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok %t", err, tc.ok)
			}
		})
	}
	for _, tc := range []struct {
		name string
		id   registry.Identity
		ok   bool
	}{
		{"clusterset only", registry.Identity{ClusterSet: "set1"}, true},
		{"with a cluster", registry.Identity{ClusterSet: "set1", Cluster: "a"}, true},
		{"no clusterset", registry.Identity{Cluster: "a"}, false},
		{"slash in cluster", registry.Identity{ClusterSet: "set1", Cluster: "a/b"}, false},
	} {
		t.Run("watcher "+tc.name, func(t *testing.T) {
			o := Options{Endpoints: []string{"http://127.0.0.1:2379"}, Identity: tc.id, TTL: time.Second}
			o.Default()
			if err := o.ValidateWatcher(); (err == nil) != tc.ok {
				t.Errorf("ValidateWatcher() = %v, want ok %t", err, tc.ok)
			}
		})
	}
	o := valid()
	o.Default()
	if o.TTL != DefaultTTL || o.Prefix != DefaultPrefix || o.RequestTimeout != DefaultRequestTimeout {
		t.Errorf("Default() = %+v", o)
	}
	o.TTL = 2500 * time.Millisecond
	if got := o.ttlSeconds(); got != 3 {
		t.Errorf("ttlSeconds() of 2.5s = %d, want 3", got)
	}
}
