package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
)

// topologyLogged is what kube-proxy's proxier logs (at -v=4) when it is
// given its node's topology labels.
const topologyLogged = "Updated proxier node topology labels"

// zoneStarts is how many starts in a row may miss their node's zone before
// the keeper reports it and waits for the next start.
const zoneStarts = 3

// zoneKeeper sees that every start of kube-proxy learns its node's zone,
// the agent's first start and every start the supervisor makes after a
// crash, and starts kube-proxy again when one does not. kube-proxy 1.35
// adds the handler that reads the node's labels to a node informer already
// running, and names the proxier as that handler's receiver only after:
// when the handler's replay of the node comes first, the proxier never
// hears of the zone and ignores every topology hint, for as long as the
// zone does not change.
type zoneKeeper struct {
	log     logr.Logger
	path    string        // kube-proxy's log
	wait    time.Duration // how long a start has to log its zone
	restart func()        // kills kube-proxy; its supervisor starts it again

	mu    sync.Mutex
	start int   // how many starts were made
	from  int64 // where the last start's lines begin in the log
	kick  chan struct{}

	once  sync.Once
	first chan error // the outcome of the first start that ended its wait
}

func newZoneKeeper(log logr.Logger, path string, restart func()) *zoneKeeper {
	return &zoneKeeper{log: log, path: path, wait: 10 * time.Second, restart: restart,
		kick: make(chan struct{}, 1), first: make(chan error, 1)}
}

// started is the supervisor's hook: kube-proxy started, its lines begin at
// logFrom.
func (z *zoneKeeper) started(logFrom int64) {
	z.mu.Lock()
	z.start++
	z.from = logFrom
	z.mu.Unlock()
	z.kickAgain()
}

func (z *zoneKeeper) last() (start int, from int64) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.start, z.from
}

// report hands the first outcome to Ready; later ones are logged only.
func (z *zoneKeeper) report(err error) {
	first := false
	z.once.Do(func() { first = true; z.first <- err })
	if !first && err != nil {
		z.log.Error(err, "kube-proxy does not have its node's zone")
	}
}

// Ready waits for the outcome of kube-proxy's first start (after the
// restarts it took): nil once it has its node's zone.
func (z *zoneKeeper) Ready(ctx context.Context) error {
	select {
	case err := <-z.first:
		z.first <- err // for a later caller
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run follows kube-proxy's starts until ctx ends. zoned says whether the
// node has a zone at all; without one kube-proxy logs nothing to wait for.
func (z *zoneKeeper) run(ctx context.Context, zoned func(context.Context) (bool, error)) {
	ok, err := zoned(ctx)
	if err != nil || !ok {
		z.report(err)
		return
	}
	missed, seen := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-z.kick:
		}
		start, from := z.last()
		if start == seen {
			continue
		}
		seen = start
		res, err := z.await(ctx, start, from)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			z.report(err)
		case res == awaitNewStart:
			// Started again meanwhile (a crash) without the zone: a miss,
			// and that start is the one to wait for.
			missed = z.missed(missed)
			z.kickAgain()
		case res == awaitLogged:
			if missed > 0 {
				z.log.Info("kube-proxy learnt its node's zone", "starts", missed+1)
			}
			missed = 0
			z.report(nil)
		default:
			if missed = z.missed(missed); missed == 0 {
				continue // reported: the next start is the supervisor's
			}
			if now, _ := z.last(); now != start {
				// Started again since the wait ended: that start is
				// not killed unseen.
				z.kickAgain()
				continue
			}
			z.log.Info("kube-proxy did not learn its node's zone; starting it again", "starts", missed)
			z.restart()
		}
	}
}

// missed counts one more start in a row without the zone, of missed
// before; at zoneStarts it reports it and starts the count again (0).
func (z *zoneKeeper) missed(missed int) int {
	if missed+1 < zoneStarts {
		return missed + 1
	}
	z.report(fmt.Errorf("kube-proxy did not learn its node's zone in %d starts in a row (no %q in %s)", zoneStarts, topologyLogged, z.path))
	return 0
}

// kickAgain has run look at the last start.
func (z *zoneKeeper) kickAgain() {
	select {
	case z.kick <- struct{}{}:
	default:
	}
}

type awaitResult int

const (
	awaitMissed awaitResult = iota
	awaitLogged
	awaitNewStart
)

// await waits up to z.wait for start (its lines from from) to log its zone.
func (z *zoneKeeper) await(ctx context.Context, start int, from int64) (awaitResult, error) {
	deadline := time.Now().Add(z.wait)
	for {
		switch ok, err := zoneLogged(z.path, from); {
		case err != nil:
			return awaitMissed, err
		case ok:
			return awaitLogged, nil
		}
		if now, _ := z.last(); now != start {
			return awaitNewStart, nil
		}
		if !time.Now().Before(deadline) {
			return awaitMissed, nil
		}
		select {
		case <-ctx.Done():
			return awaitMissed, ctx.Err()
		case <-time.After(min(200*time.Millisecond, z.wait/4)):
		}
	}
}

// zoneLogged reports whether the log at path, from offset from, has
// kube-proxy's line for topology labels that include a zone.
func zoneLogged(path string, from int64) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read kube-proxy log: %w", err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return false, fmt.Errorf("read kube-proxy log: %w", err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, topologyLogged) && strings.Contains(line, corev1.LabelTopologyZone) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read kube-proxy log: %w", err)
	}
	return false, nil
}
