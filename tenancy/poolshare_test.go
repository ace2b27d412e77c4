package tenancy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/testdb"
)

// One tenant cannot hold the serving pool: with STRATA_TENANT_POOL_SHARE
// 0.5 of a 4-connection pool, tenant a's requests that hold their
// connection (a transaction left open) take 2, its others wait for its
// share, not for the pool, and tenant b is served meanwhile. Without the
// share, a's requests take all 4 and b cannot get a connection.
func TestPoolShareKeepsATenantFromHoldingThePool(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := context.Background()
	pool, err := db.OpenPool(ctx, d.AdminURL, db.PoolConfig{Role: db.RoleApp, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	holding := make(chan struct{}, 16)
	release := make(chan struct{})
	// The handler runs a tenant transaction; a's stays open until release.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, _ := domain.TenantFromContext(r.Context())
		err := db.WithTenantTx(r.Context(), pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(r.Context(), `SELECT 1`); err != nil {
				return err
			}
			if tenant == "a" {
				holding <- struct{}{}
				<-release
			}
			return nil
		})
		if err != nil {
			httpapi.WriteError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	request := func(h http.Handler, ctx context.Context, tenant domain.TenantID) int {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/", nil).WithContext(domain.NewContext(ctx, tenant))
		h.ServeHTTP(rec, r)
		return rec.Code
	}

	t.Run("without the share", func(t *testing.T) {
		release = make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { request(handler, ctx, "a") })
		}
		for range 4 {
			<-holding
		}
		// Every connection is a's, in an open transaction: b cannot get one.
		bctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if code := request(handler, bctx, "b"); code == http.StatusNoContent {
			t.Fatal("b was served while a held all 4 connections: the test does not hold the pool")
		}
		close(release)
		wg.Wait()
	})

	t.Run("with the share", func(t *testing.T) {
		release = make(chan struct{})
		share, err := httpapi.NewPoolShare(httpapi.PoolShareConfig{PoolSize: 4, Share: 0.5, Wait: time.Minute})
		if err != nil || share.Limit() != 2 {
			t.Fatalf("share: limit %d, %v", share.Limit(), err)
		}
		h := share.Middleware(handler)
		var wg sync.WaitGroup
		codes := make(chan int, 4)
		for range 4 {
			wg.Go(func() { codes <- request(h, ctx, "a") })
		}
		<-holding
		<-holding
		if s := pool.Stat(); s.AcquiredConns() != 2 {
			t.Fatalf("%d connections in use while a holds its share, want 2", s.AcquiredConns())
		}
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		if code := request(h, bctx, "b"); code != http.StatusNoContent {
			t.Fatalf("b answered %d while a held its share, want 204", code)
		}
		t.Logf("b served in %s while a held 2 connections and had 2 requests waiting for its share", time.Since(start).Round(time.Microsecond))
		select {
		case <-holding:
			t.Fatal("a holds a third connection")
		default:
		}
		// A short wait turns a's excess into 429.
		short, _ := httpapi.NewPoolShare(httpapi.PoolShareConfig{PoolSize: 4, Share: 0.25, Wait: time.Millisecond})
		hold := make(chan struct{})
		entered := make(chan struct{})
		sh := short.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { close(entered); <-hold }))
		go request(sh, ctx, "c")
		<-entered
		if code := request(sh, ctx, "c"); code != http.StatusTooManyRequests {
			t.Fatalf("c beyond its share of 1: %d, want 429", code)
		}
		close(hold)

		close(release)
		wg.Wait()
		close(codes)
		for code := range codes {
			if code != http.StatusNoContent {
				t.Fatalf("a's request answered %d, want every one served in turn", code)
			}
		}
	})
}
