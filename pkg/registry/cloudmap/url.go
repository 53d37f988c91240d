package cloudmap

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ParseURL returns the Options a registry URL names:
// cloudmap://?region=REGION with the query options endpoint (for testing),
// poll-interval, sweep-interval, feed-overlap, cleanup-empty and rate=OPERATION:QPS:BURST
// (repeatable). The identity and TTL are not part of a URL; the caller sets
// them.
func ParseURL(u *url.URL) (Options, error) {
	if u.Scheme != "cloudmap" {
		return Options{}, fmt.Errorf("cloudmap registry URL %q: scheme %q, want cloudmap", u.Redacted(), u.Scheme)
	}
	q := u.Query()
	for name := range q {
		switch name {
		case "region", "endpoint", "cleanup-empty", "poll-interval", "sweep-interval", "feed-overlap", "rate":
		case "list-interval":
			return Options{}, fmt.Errorf("cloudmap registry URL %q: list-interval is gone: the change feed finds new namespaces and services (poll-interval), the sweep (sweep-interval) repairs what it misses", u.Redacted())
		default:
			return Options{}, fmt.Errorf("cloudmap registry URL %q: unknown option %q (known: region, endpoint, poll-interval, sweep-interval, feed-overlap, cleanup-empty, rate)", u.Redacted(), name)
		}
	}
	opts := Options{
		Region:   q.Get("region"),
		Endpoint: q.Get("endpoint"),
	}
	if v := q.Get("cleanup-empty"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Options{}, fmt.Errorf("cloudmap registry URL: cleanup-empty: %q is not true or false", v)
		}
		opts.CleanupEmpty = b
	}
	for name, dst := range map[string]*time.Duration{"poll-interval": &opts.PollInterval, "sweep-interval": &opts.SweepInterval, "feed-overlap": &opts.FeedOverlap} {
		if v := q.Get(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return Options{}, fmt.Errorf("cloudmap registry URL: %s: %w", name, err)
			}
			*dst = d
		}
	}
	for _, r := range q["rate"] {
		op, limit, err := parseRate(r)
		if err != nil {
			return Options{}, fmt.Errorf("cloudmap registry URL: rate=%q: %w", r, err)
		}
		if opts.RateLimits == nil {
			opts.RateLimits = DefaultRateLimits()
		}
		opts.RateLimits[op] = limit
	}
	return opts, nil
}

// parseRate parses OPERATION:QPS:BURST.
func parseRate(s string) (string, RateLimit, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return "", RateLimit{}, fmt.Errorf("want OPERATION:QPS:BURST")
	}
	qps, err := strconv.ParseFloat(parts[1], 64)
	if err != nil {
		return "", RateLimit{}, fmt.Errorf("qps: %w", err)
	}
	burst, err := strconv.Atoi(parts[2])
	if err != nil {
		return "", RateLimit{}, fmt.Errorf("burst: %w", err)
	}
	return parts[0], RateLimit{QPS: qps, Burst: burst}, nil
}
