package orderview_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/strata-es/strata/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
