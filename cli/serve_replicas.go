package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/readmodels/queryapi"
)

// Query replicas (issue 20; docs/scaling.md, "Query replicas"): with
// STRATA_QUERY_DATABASE_URL the query role reads its routes from streaming
// replicas of the database, keeping read-your-writes (queryapi/replicas.go).

// queryReplicas opens the replicas' pools and their monitor, or returns
// nil when STRATA_QUERY_DATABASE_URL is unset. The logins are held to the
// serving rule (ARCHITECTURE decision 11) as the primary's are.
func queryReplicas(a *app) (*queryapi.ReplicaSet, func(source, fallback string), error) {
	raw := a.env.str("STRATA_QUERY_DATABASE_URL", "")
	if raw == "" || a.placement != "" { // replicas are the pool's; a placement's queries read its primary
		return nil, nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	maxLag, err := a.env.duration("STRATA_QUERY_REPLICA_MAX_LAG", defaultReplicaMaxLag)
	if err != nil {
		return nil, nil, err
	}
	allow, err := a.env.boolean("STRATA_ALLOW_PRIVILEGED_LOGIN", false)
	if err != nil {
		return nil, nil, err
	}
	maxConns, err := a.env.integer("STRATA_DB_MAX_CONNS", 8)
	if err != nil {
		return nil, nil, err
	}
	var named []queryapi.NamedPool
	fail := func(err error) (*queryapi.ReplicaSet, func(string, string), error) {
		for _, n := range named {
			n.Pool.Close()
		}
		return nil, nil, err
	}
	for i, u := range splitURLs(raw) {
		u = strings.TrimSpace(u)
		name, err := replicaName(u)
		if err != nil {
			return fail(fmt.Errorf("STRATA_QUERY_DATABASE_URL (replica %d): %w", i+1, err))
		}
		pool, err := db.OpenPool(ctx, u, db.PoolConfig{Role: db.RoleApp, AppName: "strata-replica", MaxConns: int32(maxConns)})
		if err != nil {
			return fail(fmt.Errorf("STRATA_QUERY_DATABASE_URL (replica %s): %w", name, err))
		}
		named = append(named, queryapi.NamedPool{Name: name, Pool: pool})
		err = probeServing(ctx, pool, db.RoleApp)
		var esc *db.EscalationError
		switch {
		case err == nil:
		case errors.As(err, &esc) && allow:
			a.logger.Warn(fmt.Sprintf("%s (replica %s); STRATA_ALLOW_PRIVILEGED_LOGIN=true serves through it anyway", esc.Error(), name))
		case errors.As(err, &esc):
			return fail(fmt.Errorf("refusing to serve: %s (replica %s, STRATA_QUERY_DATABASE_URL); serving sessions must not be able to leave their role: use a login that is a member of strata_app only (the primary's, replicated)", esc.Error(), name))
		default:
			// A replica down at start is not a reason not to serve: reads
			// fall back to the primary until it answers.
			a.logger.Warn("query replica does not answer yet; reads fall back to the primary", "replica", name)
		}
	}
	m := a.metrics.NewReplicaMetrics()
	set := queryapi.NewReplicaSet(queryapi.ReplicaConfig{
		Primary: a.appPool,
		MaxLag:  maxLag,
		Logger:  a.logger,
		OnSample: func(s queryapi.ReplicaSample) {
			m.Observe(s.Name, s.Usable(), s.LagSeconds, s.LagBytes)
		},
	}, named...)
	a.workers = append(a.workers,
		worker{name: "query replica monitor", run: set.Run},
		worker{name: "query replica pools", run: func(ctx context.Context) error {
			<-ctx.Done()
			for _, n := range named {
				n.Pool.Close()
			}
			return nil
		}})
	required, err := a.env.boolean("STRATA_QUERY_REPLICA_REQUIRED", false)
	if err != nil {
		return fail(err)
	}
	a.readiness = append(a.readiness, readinessCheck{"query_replicas", func(context.Context) error {
		if err := replicasUsable(set); err != nil && required {
			return err
		}
		return nil
	}})
	a.readyInfo = append(a.readyInfo, func(body map[string]any) {
		body["replicas"] = set.Samples()
		if err := replicasUsable(set); err != nil && !required {
			body["warnings"] = append(body["warnings"].([]string), err.Error())
		}
	})
	logReplicas(a, named, maxLag)
	return set, m.Read, nil
}

// defaultReplicaMaxLag is STRATA_QUERY_REPLICA_MAX_LAG's default.
const defaultReplicaMaxLag = 10 * time.Second

// replicasUsable reports none of the replicas usable. Reads answer from
// the primary then, so by default /readyz only warns (every query process
// unready because the one replica died would be an outage the primary can
// prevent); STRATA_QUERY_REPLICA_REQUIRED=true makes it unready, for a
// primary that must not take the query load.
func replicasUsable(set *queryapi.ReplicaSet) error {
	var states []string
	for _, s := range set.Samples() {
		if s.Usable() {
			return nil
		}
		states = append(states, s.Name+" "+s.State)
	}
	return fmt.Errorf("no query replica usable (%s): reads fall back to the primary", strings.Join(states, ", "))
}

// splitURLs splits STRATA_QUERY_DATABASE_URL into one connection string
// per replica. A URL may itself name several hosts
// (postgres://u@r1:5432,r2:5432/strata?target_session_attrs=prefer-standby,
// docs/operations.md "Failover"), so a list of URLs is split only where the
// next URL begins, at a comma followed by postgres:// or postgresql://; a
// list of keyword/value strings at every comma.
func splitURLs(raw string) []string {
	if !strings.Contains(raw, "://") {
		return strings.Split(raw, ",")
	}
	var out []string
	start := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != ',' {
			continue
		}
		next := strings.TrimLeft(raw[i+1:], " \t")
		if strings.HasPrefix(next, "postgres://") || strings.HasPrefix(next, "postgresql://") {
			out = append(out, raw[start:i])
			start = i + 1
		}
	}
	return append(out, raw[start:])
}

// replicaName is a replica's host:port (every host of a multi-host URL,
// joined by "|"), its name in metrics and headers (never the password).
func replicaName(raw string) (string, error) {
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return "", errors.New("invalid connection string")
	}
	name := func(host string, port uint16) string {
		if strings.HasPrefix(host, "/") {
			host = "unix:" + host
		}
		return fmt.Sprintf("%s:%d", host, port)
	}
	names := []string{name(cfg.ConnConfig.Host, cfg.ConnConfig.Port)}
	for _, f := range cfg.ConnConfig.Fallbacks {
		if n := name(f.Host, f.Port); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return strings.Join(names, "|"), nil
}

func logReplicas(a *app, named []queryapi.NamedPool, maxLag time.Duration) {
	names := make([]string, len(named))
	for i, n := range named {
		names[i] = n.Name
	}
	a.logger.Info("query replicas", "replicas", strings.Join(names, ","), "max_lag", maxLag.String())
}
