package esdb

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestKeyLocks(t *testing.T) {
	t.Parallel()
	var k keyLocks
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := k.lock(context.Background(), "t\x00key")
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			for {
				m := maxInside.Load()
				if n <= m || maxInside.CompareAndSwap(m, n) {
					break
				}
			}
			inside.Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 {
		t.Fatalf("%d holders at once", maxInside.Load())
	}

	// Other keys are independent; a waiter gives up with its context.
	unlock, _ := k.lock(context.Background(), "a")
	other, err := k.lock(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	other()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := k.lock(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting on a held key with a cancelled context: %v", err)
	}
	unlock()
	if len(k.locks) != 0 {
		t.Fatalf("%d lock entries left behind", len(k.locks))
	}
}
