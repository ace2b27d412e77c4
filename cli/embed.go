package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/strata-es/strata/module"
)

// Server is strata's serve embedded in a bigger program: the program
// mounts Handler on its own listener (beside its own routes, behind its own
// middleware) and runs the workers (projection runners, process managers,
// the relay, retention) with Run. It is what `strata serve` builds, with
// the same configuration from the environment, the same routes, roles and
// shutdown; only the listeners (the API's, STRATA_METRICS_ADDR's,
// STRATA_PPROF_ADDR's) are the program's own.
type Server struct {
	b *built
}

// ServerOptions configure NewServer. Zero values take serve's defaults.
type ServerOptions struct {
	// Roles are serve's --roles: "command,query,projector" (the default,
	// also STRATA_ROLES), or a part of them.
	Roles string
	// Getenv is the configuration (default os.Getenv): every setting of
	// `strata config`, the modules' too.
	Getenv func(string) string
	// Logger defaults to JSON on standard error at STRATA_LOG_LEVEL.
	Logger *slog.Logger
	// Output receives what serve prints for a person (the development
	// token's banner is not printed; the tracing exporter "stdout" writes
	// here). Default: io.Discard.
	Output io.Writer
}

// NewServer wires a serving process of mods: it connects (or starts the
// embedded PostgreSQL), migrates when STRATA_AUTO_MIGRATE says so, and
// mounts every role's routes. ctx bounds the setup and must live as long
// as the Server: background work started while wiring (the notification
// listener, for one) ends with it. Close releases everything.
func NewServer(ctx context.Context, opts ServerOptions, mods ...module.Module) (*Server, error) {
	set := module.Set(mods)
	if err := set.Check(); err != nil {
		return nil, fmt.Errorf("strata: the application's modules: %w", err)
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	e := newEnv(getenv, set)
	roleText := opts.Roles
	if roleText == "" {
		roleText = e.str("STRATA_ROLES", strings.Join(allRoles, ","))
	}
	roles, err := parseRoles(roleText)
	if err != nil {
		return nil, fmt.Errorf("strata: roles: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		if logger, err = newLogger(e, os.Stderr); err != nil {
			return nil, fmt.Errorf("strata: %w", err)
		}
	}
	out := opts.Output
	if out == nil {
		out = io.Discard
	}
	b, err := build(ctx, e, roles, logger, out)
	if err != nil {
		return nil, fmt.Errorf("strata: %w", err)
	}
	return &Server{b: b}, nil
}

// Handler answers every route of the roles: the modules' commands and
// queries, the admin and platform APIs, the console, /livez, /readyz and
// /openapi.yaml, in strata's JSON error shape.
func (s *Server) Handler() http.Handler { return s.b.handler }

// MetricsHandler serves the Prometheus metrics (what STRATA_METRICS_ADDR
// serves on its own listener).
func (s *Server) MetricsHandler() http.Handler { return s.b.a.metrics.Handler() }

// Run runs the workers of the roles until ctx ends or one fails, then
// stops them within serve's shutdown timeout. It returns nil after ctx
// ended and they stopped in time. Shut the program's HTTP server down
// before or after, as the program sees fit.
func (s *Server) Run(ctx context.Context) error {
	if s.b.a == nil {
		return errors.New("strata: the server is closed")
	}
	return s.b.a.runWorkers(ctx, nil, nil)
}

// Close releases the pools, the event store's client, the tracing
// exporter and the embedded PostgreSQL; call it once Run has returned.
func (s *Server) Close() { s.b.close() }
