package cli

import (
	"fmt"

	"github.com/strata-es/strata/eventstore/postgres"
)

// groupCommit returns the PostgreSQL store's options for
// STRATA_GROUP_COMMIT: off, on (postgres.DefaultGroupCommit when unset),
// or on with parameters (on,max_batch=64,max_wait=0s,in_flight=2).
func (e env) groupCommit() ([]postgres.Option, error) {
	v := e.str("STRATA_GROUP_COMMIT", postgres.DefaultGroupCommit)
	cfg, on, err := postgres.ParseGroupCommit(v)
	if err != nil {
		return nil, fmt.Errorf("STRATA_GROUP_COMMIT: %w", err)
	}
	if !on {
		return nil, nil
	}
	return []postgres.Option{postgres.WithGroupCommit(cfg)}, nil
}
