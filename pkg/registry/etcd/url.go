package etcd

import (
	"fmt"
	"net/url"
	"strings"
)

// ParseURL returns the Options a registry URL names:
// etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (plain HTTP) or etcds://… (TLS).
// The TLS files, credentials, identity and TTL are not part of a URL; the
// caller sets them.
func ParseURL(u *url.URL) (Options, error) {
	var scheme string
	switch u.Scheme {
	case "etcd":
		scheme = "http"
	case "etcds":
		scheme = "https"
	default:
		return Options{}, fmt.Errorf("etcd registry URL %q: scheme %q, want etcd or etcds", u.Redacted(), u.Scheme)
	}
	if u.Host == "" {
		return Options{}, fmt.Errorf("etcd registry URL %q names no etcd endpoint", u.Redacted())
	}
	var opts Options
	for _, h := range strings.Split(u.Host, ",") {
		opts.Endpoints = append(opts.Endpoints, scheme+"://"+h)
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		opts.Prefix = p
	}
	return opts, nil
}
