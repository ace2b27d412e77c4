package commands_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/internal/linearize"
	"github.com/strata-es/strata/internal/testdb"
)

// The idempotency-key register, judged by porcupine
// (linearize.RegisterModel): commands on orders sent under keys, with
// retries, concurrent duplicates, reuse of a key with another body, and
// rejections (adding a line to a placed order; placing an empty one)
// whose outcome depends on what ran first. Some are made indeterminate
// at fixed points: their context is cancelled as they reach the store
// (racing their work), or their answer is thrown away. Every key is asked again
// at the end, so what an indeterminate command did is observed.

// cancelKey marks a context to cancel as the request reaches the store.
type cancelKey struct{}

// cancelling cancels a marked context concurrently with each of the
// request's store calls (the idempotency lookup, the stream read, the
// append, the saving of an outcome), so the cancellation races the
// request's work wherever it is: a replay may still be answered, an
// append may commit, fail before the server has it, or fail while the
// server commits it.
type cancelling struct{ *postgres.Store }

func cancelNow(ctx context.Context) {
	if cancel, ok := ctx.Value(cancelKey{}).(context.CancelFunc); ok {
		go cancel()
	}
}

func (s cancelling) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	cancelNow(ctx)
	return s.Store.Append(ctx, req)
}

func (s cancelling) ReadStream(ctx context.Context, tenant, stream string, after int64) ([]event.Record, error) {
	cancelNow(ctx)
	return s.Store.ReadStream(ctx, tenant, stream, after)
}

func (s cancelling) LookupIdempotency(ctx context.Context, tenant, key string) (eventstore.IdempotencyRecord, bool, error) {
	cancelNow(ctx)
	return s.Store.LookupIdempotency(ctx, tenant, key)
}

func (s cancelling) SaveIdempotency(ctx context.Context, tenant, key, hash string, response []byte) error {
	cancelNow(ctx)
	return s.Store.SaveIdempotency(ctx, tenant, key, hash, response)
}

// keyedCommand is what a key stands for: the command and its request
// hash (the body a client would send).
type keyedCommand struct {
	key, hash string
	cmd       ordercmd.Command
}

const (
	regOrders = 3
	regLines  = 4
)

// commandFor returns the command under key number k of order j: k <
// regLines adds a line (other = the same key with another body), k ==
// regLines places the order.
func commandFor(j, k int, other bool) keyedCommand {
	id := fmt.Sprintf("o-%d", j)
	if k == regLines {
		return keyedCommand{key: id + "/place", hash: "place", cmd: ordercmd.PlaceOrder{OrderID: id}}
	}
	kc := keyedCommand{key: fmt.Sprintf("%s/line-%d", id, k), hash: fmt.Sprintf("line-%d", k),
		cmd: ordercmd.AddLine{OrderID: id, ProductID: fmt.Sprintf("p-%d", k), Quantity: int64(k + 1), UnitPrice: money.Money{Amount: 100, Currency: "EUR"}}}
	if other {
		kc.hash = fmt.Sprintf("other-%d", k)
		kc.cmd = ordercmd.AddLine{OrderID: id, ProductID: fmt.Sprintf("q-%d", k), Quantity: 1, UnitPrice: money.Money{Amount: 7, Currency: "EUR"}}
	}
	return kc
}

type regRun struct {
	mu                                                 sync.Mutex
	executed, replayed, rejected, reused, lost, cancel int
	exhausted                                          int // conflicts outlasted the retries: nothing recorded
	unexpected                                         []error
}

func (r *regRun) add(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func (r *regRun) String() string {
	return fmt.Sprintf("%d executed, %d replayed, %d rejections, %d reused-key answers, %d left indeterminate by the cancellation, %d answers lost, %d gave up on conflicts",
		r.executed, r.replayed, r.rejected, r.reused, r.cancel, r.lost, r.exhausted)
}

var regTenants = []domain.TenantID{"t-a", "t-b"}

// runRegisterWorkload: per tenant, 8 goroutines x ops commands under the
// keys of 3 orders (4 line keys and a place key each; 1 in 6 line
// commands with another body), command 3 of every twenty cancelled as it
// reaches the store and command 13 losing its answer; then every key
// asked twice more with its usual body.
func runRegisterWorkload(t *testing.T, h *commands.Handler[*order.Order], store *postgres.Store, ops int) (*linearize.RegisterRecorder, *regRun) {
	t.Helper()
	rec := &linearize.RegisterRecorder{}
	run := &regRun{}
	for _, tenant := range regTenants {
		ctx := domain.NewContext(context.Background(), tenant)
		for j := 0; j < regOrders; j++ {
			if _, err := h.Handle(ctx, ordercmd.CreateOrder{OrderID: fmt.Sprintf("o-%d", j), CustomerID: "c", Currency: "EUR"}, commands.Options{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send := func(client int, tenant domain.TenantID, kc keyedCommand, cancelMid, loseAnswer bool) {
		ctx, cancel := context.WithTimeout(domain.NewContext(context.Background(), tenant), 30*time.Second)
		defer cancel()
		if cancelMid {
			ctx = context.WithValue(ctx, cancelKey{}, cancel)
		}
		c := rec.Call(client, string(tenant), kc.key, kc.hash)
		res, err := h.Handle(ctx, kc.cmd, commands.Options{Idempotency: &commands.Idempotency{Key: kc.key, RequestHash: kc.hash, Respond: respond}})
		switch {
		case loseAnswer:
			rec.Indeterminate(c)
			run.add(func() { run.lost++ })
		case err == nil && res.Replayed != nil:
			rec.Answered(c, string(res.Replayed))
			run.add(func() { run.replayed++ })
		case err == nil:
			body, _ := respond(res, nil)
			rec.Answered(c, string(body))
			run.add(func() { run.executed++ })
		case errors.Is(err, commands.ErrIdempotencyKeyReused):
			rec.Reused(c)
			run.add(func() { run.reused++ })
		case errors.Is(err, domain.ErrRejected) || errors.Is(err, domain.ErrNotFound):
			// A first execution's rejection, as it is stored.
			body, _ := respond(commands.Result{}, err)
			rec.Answered(c, string(body))
			run.add(func() { run.rejected++ })
		case cancelMid:
			rec.Indeterminate(c)
			run.add(func() { run.cancel++ })
		case errors.Is(err, commands.ErrVersionConflict):
			// Definitely nothing recorded; indeterminate is the weaker,
			// still true, description.
			rec.Indeterminate(c)
			run.add(func() { run.exhausted++ })
		default:
			rec.Indeterminate(c)
			run.add(func() { run.unexpected = append(run.unexpected, err) })
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for ti, tenant := range regTenants {
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(19, uint64(ti*100+g)))
				<-start
				for i := 0; i < ops; i++ {
					k := rng.IntN(regLines + 1)
					kc := commandFor(rng.IntN(regOrders), k, k < regLines && rng.IntN(6) == 0)
					send(g, tenant, kc, i%20 == 3, i%20 == 13)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for _, tenant := range regTenants {
		for j := 0; j < regOrders; j++ {
			for k := 0; k <= regLines; k++ {
				send(8, tenant, commandFor(j, k, false), false, false)
				send(8, tenant, commandFor(j, k, false), false, false)
			}
		}
	}
	if len(run.unexpected) > 0 {
		t.Fatalf("unexpected errors: %v", run.unexpected)
	}
	return rec, run
}

// executedOnce: no command (one key of one tenant) appended events in
// two executions. Its events share the command ID derived from the key.
func executedOnce(t *testing.T, store *postgres.Store) {
	t.Helper()
	for _, tenant := range regTenants {
		for j := 0; j < regOrders; j++ {
			recs, err := store.ReadStream(context.Background(), string(tenant), fmt.Sprintf("order-o-%d", j), 0)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for _, r := range recs {
				seen[r.Metadata.CommandID]++
			}
			for k := 0; k <= regLines; k++ {
				key := commandFor(j, k, false).key
				id := uuid.NewSHA1(commands.EventIDSpace, []byte(string(tenant)+"\x00"+key)).String()
				if seen[id] > 1 {
					t.Fatalf("%s: the command under key %s appended %d events (executed twice)", tenant, key, seen[id])
				}
			}
		}
	}
}

// TestIdempotencyRegisterIsLinearizable: 2 tenants x 8 goroutines x 40
// commands under 15 keys per tenant, plus the closing requests: porcupine
// finds a linearization of every key's history.
func TestIdempotencyRegisterIsLinearizable(t *testing.T) {
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector)
	h := newHandler(t, cancelling{store}, cancelling{store})
	rec, run := runRegisterWorkload(t, h, store, 40)
	c := rec.Counts()
	t.Logf("%d commands, %d indeterminate: %v", c.Operations, c.Indeterminate, run)
	if run.lost == 0 || run.cancel == 0 || run.reused == 0 || run.rejected == 0 || run.replayed == 0 {
		t.Fatalf("the run did not exercise every kind of answer: %v", run)
	}
	linearize.Require(t, linearize.RegisterModel, rec.Operations(), time.Minute)
	executedOnce(t, store)
}

// forgetful is a broken idempotency store: it never finds a recorded
// outcome (as if outcomes were not kept), so a retry executes or answers
// anew instead of replaying.
type forgetful struct{ eventstore.IdempotencyStore }

func (forgetful) LookupIdempotency(context.Context, string, string) (eventstore.IdempotencyRecord, bool, error) {
	return eventstore.IdempotencyRecord{}, false, nil
}

// TestIdempotencyCheckerBites: with outcomes forgotten, the same workload
// must be judged Illegal (certain: every key is asked twice at the end,
// and the second answer cannot be the first's replay).
func TestIdempotencyCheckerBites(t *testing.T) {
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector)
	h := newHandler(t, cancelling{store}, forgetful{cancelling{store}})
	rec, run := runRegisterWorkload(t, h, store, 10)
	dir := os.Getenv(linearize.OutputDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	v, err := linearize.Check(linearize.RegisterModel, rec.Operations(), time.Minute, dir, t.Name(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v\n%v", run, v)
	if v.Result != porcupine.Illegal {
		t.Fatalf("a forgetful register's history was judged %s, want Illegal", v.Result)
	}
	if _, err := os.Stat(v.Visualization); err != nil || !strings.Contains(v.Explain, "->") {
		t.Fatalf("no visualisation or explanation of the illegal history: %v", v)
	}
}
