package etcd

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A scoped watch (registry.Scoped) reads the values of the records it
// needs alone: the first read lists every key of the clusterset without
// values, then reads the values of the needed keys (alive records, the own
// cluster's, the records of the namespaces needed) in ranges of keys it
// knows, at the listing's revision; a namespace needed later has its
// records' values read then, at the revision the watch has reached. At 100
// clusters × 5,000 Services, a cluster with 2 of 50 namespaces receives
// about 1.5 MiB of keys and 1,400 values instead of 18 MiB. A handler that
// needs the values of at least half the other clusters' records of the
// first page of keys (as a cluster that has every namespace does) has the
// rest read with values (readScoped): listing every key, then reading
// nearly every value, would make etcd read each value twice.

// keyRange is a range of keys of the clusterset, [from, end), all of which
// the watch knows: n of them.
type keyRange struct {
	from, end string
	n         int
}

// rangeBuilder cuts keys given in order into ranges of consecutive needed
// keys, each of at most page keys.
type rangeBuilder struct {
	page   int
	ranges []keyRange
	open   bool
}

// add takes the next key in order, needed or not.
func (b *rangeBuilder) add(key string, needed bool) {
	switch {
	case !needed:
		b.open = false
	case b.open && b.ranges[len(b.ranges)-1].n < b.page:
		last := &b.ranges[len(b.ranges)-1]
		last.end, last.n = key+"\x00", last.n+1
	default:
		b.ranges = append(b.ranges, keyRange{from: key, end: key + "\x00", n: 1})
		b.open = true
	}
}

// keys is the number of keys of the ranges.
func (b *rangeBuilder) keys() int {
	n := 0
	for _, r := range b.ranges {
		n += r.n
	}
	return n
}

// parent is the key's "directory": the keys of one parent are consecutive
// in etcd, with nothing between them but keys under that parent (a key
// out of the clusterset's layout, read and ignored).
func parent(key string) string { return key[:strings.LastIndexByte(key, '/')+1] }

// txnRanges bounds the ranges read in one transaction: etcd refuses a
// transaction of more operations than its --max-txn-ops (128 by default).
const txnRanges = 64

// readValues reads the keys of ranges, values included, at revision rev of
// etcd cluster etcdCluster: in transactions of at most txnRanges ranges and
// ResyncPageSize keys, one request each (within RequestTimeout), one after
// the other. An answer from another etcd cluster is an error (errResync):
// the keys listed are not its own.
func (w *watch) readValues(ctx context.Context, rev int64, etcdCluster uint64, ranges []keyRange) ([]*mvccpb.KeyValue, error) {
	var kvs []*mvccpb.KeyValue
	page := int(w.c.opts.ResyncPageSize)
	for len(ranges) > 0 {
		n, keys := 0, 0
		for n < len(ranges) && n < txnRanges && (n == 0 || keys+ranges[n].n <= page) {
			keys += ranges[n].n
			n++
		}
		ops := make([]clientv3.Op, n)
		for i, r := range ranges[:n] {
			ops[i] = clientv3.OpGet(r.from, clientv3.WithRange(r.end), clientv3.WithRev(rev))
		}
		var resp *clientv3.TxnResponse
		err := w.request(ctx, func(ctx context.Context) error {
			var err error
			resp, err = w.c.cli.Txn(ctx).Then(ops...).Commit()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("read values: %w", err)
		}
		if resp.Header.ClusterId != etcdCluster {
			return nil, fmt.Errorf("%w: values read from etcd cluster %x, the keys from %x", errResync, resp.Header.ClusterId, etcdCluster)
		}
		for _, r := range resp.Responses {
			if rr := r.GetResponseRange(); rr != nil {
				kvs = append(kvs, rr.Kvs...)
			}
		}
		ranges = ranges[n:]
	}
	return kvs, nil
}
