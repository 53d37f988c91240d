package cloudmap

import (
	"context"
	"time"
)

// beat writes the heartbeat instance with the current time.
func (b *Backend) beat(ctx context.Context) error {
	hb := b.enc.heartbeat(b.now().UnixMilli(), b.since, b.opts.TTL)
	err := b.register(ctx, b.systemService(heartbeatService), hb)
	if isNotFound(err) {
		// The system namespace or service was deleted: create it again.
		svc, eerr := b.recreateSystemService(ctx, heartbeatService)
		if eerr != nil {
			return eerr
		}
		err = b.register(ctx, svc, hb)
	}
	return err
}

// heartbeatLoop refreshes the heartbeat every TTL/3 until Close, and sooner
// after a failure.
func (b *Backend) heartbeatLoop() {
	defer close(b.done)
	interval := b.opts.heartbeatInterval()
	retry := min(interval, time.Second)
	t := time.NewTimer(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.ctx, interval)
		err := b.beat(ctx)
		cancel()
		if b.ctx.Err() != nil {
			return
		}
		next := interval
		switch {
		case err != nil:
			b.log.Error(err, "cannot refresh heartbeat, retrying", "retryIn", retry)
			next = retry
			failing = true
		case failing:
			b.log.Info("heartbeat refreshed again")
			failing = false
		}
		t.Reset(next)
	}
}
