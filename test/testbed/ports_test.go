package testbed_test

import (
	"sync"
	"testing"

	"github.com/mcsd-io/mcsd/test/testbed"
)

// Ports picked at the same time, as clusters started together pick theirs,
// are never the same.
func TestFreePortsNeverRepeat(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[int]bool{}
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				ports, err := testbed.FreePorts(6)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, p := range ports {
					if seen[p] {
						t.Errorf("port %d handed out twice", p)
					}
					seen[p] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
