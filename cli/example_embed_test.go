package cli_test

import (
	"context"
	"log"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/strata-es/strata/cli"
	"github.com/strata-es/strata/examples/orders"
)

// A bigger program embeds strata: its routes beside its own on its own
// listener, its workers run by Run, everything else configured as for
// `strata serve` (the environment, `strata config`).
func ExampleNewServer() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	s, err := cli.NewServer(ctx, cli.ServerOptions{Roles: "command,query,projector"}, orders.Module())
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.Handle("/", s.Handler())
	srv := &http.Server{Addr: ":8080", Handler: mux}
	go func() { _ = srv.ListenAndServe() }()
	if err := s.Run(ctx); err != nil { // until SIGTERM
		log.Print(err)
	}
	_ = srv.Shutdown(context.Background())
}
