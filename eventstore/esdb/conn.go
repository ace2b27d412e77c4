package esdb

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
)

// conn owns the client and works around two defects of EventStore-Client-Go
// v4.2.0's connection state machine (esdb/impl.go):
//
//  1. When node discovery fails (server down at the first call, or after the
//     client dropped a broken connection), the state machine marks the
//     client closed and exits for good: every later call fails with
//     ErrorCodeConnectionClosed, so a store opened while EventStoreDB was
//     down would never recover. conn replaces such a client with a new one.
//  2. Calls reach the state machine through an unbuffered channel with no
//     context. Callers queued behind a discovery that fails stay blocked
//     forever, and closing the client then makes them panic. conn therefore
//     lets exactly one caller (a probe) use a client until it is known to be
//     connected, never closes a client that may be dead, and runs every call
//     in a goroutine that the caller abandons when its context ends.
//
// Once connected, the client reconnects by itself (to the leader on
// not-leader, by rediscovery on unavailable); conn only notices trouble
// (connectionTrouble) and makes the next call probe first.
type conn struct {
	cfg *esdb.Configuration
	red redactor

	gate chan struct{} // held by the one probing caller

	mu        sync.Mutex
	client    *esdb.Client
	gen       uint64 // bumped with every new client
	connected bool   // the current client has a connection
	closed    bool
	inflight  sync.WaitGroup
}

func newConn(cfg *esdb.Configuration, red redactor) (*conn, error) {
	client, err := esdb.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("esdb: create client: %s", red.redact(err.Error()))
	}
	return &conn{cfg: cfg, red: red, gate: make(chan struct{}, 1), client: client}, nil
}

// acquire returns a client known to be connected, probing (alone) first if
// needed. The returned generation identifies the client in report.
func (c *conn) acquire(ctx context.Context) (*esdb.Client, uint64, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, 0, ErrClosed
		}
		if c.connected {
			client, gen := c.client, c.gen
			c.inflight.Add(1)
			c.mu.Unlock()
			return client, gen, nil
		}
		c.mu.Unlock()

		select {
		case c.gate <- struct{}{}:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		c.mu.Lock()
		if c.connected || c.closed {
			c.mu.Unlock()
			<-c.gate
			continue
		}
		client, gen := c.client, c.gen
		c.mu.Unlock()

		done := make(chan error, 1)
		go func() {
			// GetServerVersion runs node discovery and nothing else. If it
			// fails, the client's state machine has exited (defect 1).
			_, err := client.GetServerVersion()
			c.mu.Lock()
			if gen == c.gen && !c.closed {
				if err == nil {
					c.connected = true
				} else if fresh, nerr := esdb.NewClient(c.cfg); nerr == nil {
					c.client, c.gen = fresh, c.gen+1 // the dead one is left to the GC
				}
			}
			c.mu.Unlock()
			<-c.gate
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				return nil, 0, err
			}
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// release ends a call begun by acquire; err is the call's result.
func (c *conn) release(gen uint64, err error) {
	if err != nil {
		if code, ok := codeOf(err); ok && connectionTrouble(code) {
			c.mu.Lock()
			if gen == c.gen {
				c.connected = false
			}
			c.mu.Unlock()
		}
	}
	c.inflight.Done()
}

// call runs fn with a connected client. It returns when fn returns or ctx
// ends, whichever is first (defect 2); an abandoned fn finishes on its own
// (or, if the client hung, never). Errors come back translated for op.
func (c *conn) call(ctx context.Context, op string, fn func(*esdb.Client) error) error {
	client, gen, err := c.acquire(ctx)
	if err != nil {
		return c.red.translate(op, err)
	}
	done := make(chan error, 1)
	go func() {
		err := fn(client)
		c.release(gen, err)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		return c.red.translate(op, ctx.Err())
	}
	if err != nil && ctx.Err() != nil {
		// The client reports a cancelled call as a gRPC status; say what
		// really happened.
		return c.red.translate(op, ctx.Err())
	}
	return c.red.translate(op, err)
}

// close refuses new calls, waits (up to wait) for the running ones, and
// closes the client if it is connected and idle (a client whose state
// machine may have exited, or that still has a hung call, is not closed:
// see defect 2).
func (c *conn) close(wait time.Duration) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	idle := make(chan struct{})
	go func() { c.inflight.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-time.After(wait):
		return
	}
	c.mu.Lock()
	client, connected := c.client, c.connected
	c.mu.Unlock()
	if connected {
		_ = client.Close()
	}
}

// suspect makes the next call probe the connection first (after a dropped
// subscription, whose error is a bare gRPC status). On a client that is in
// fact connected the probe answers at once.
func (c *conn) suspect() {
	c.mu.Lock()
	c.connected = false
	c.mu.Unlock()
}
