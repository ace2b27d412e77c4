package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/strata-es/strata/placement"
)

// replayPlacement takes `--placement NAME` (or `--placement=NAME`) out of
// a replay command's arguments. A placement other than the pool is looked
// up in the registry (on DATABASE_URL, the control plane), and the command
// runs against its database: its owner URL and the serving logins there,
// as `strata tenants move` reaches it. Each placement has its own log,
// runners, checkpoints and dead letters (docs/scaling.md, "Placements").
func replayPlacement(ctx context.Context, args []string, e env, stderr io.Writer) ([]string, env, error) {
	name := ""
	rest := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--placement" || a == "-placement":
			if i+1 >= len(args) {
				return nil, e, fmt.Errorf("--placement needs a placement name (`strata placements list`)")
			}
			name = args[i+1]
			i++
		case strings.HasPrefix(a, "--placement=") || strings.HasPrefix(a, "-placement="):
			name = a[strings.Index(a, "=")+1:]
		default:
			rest = append(rest, a)
		}
	}
	if name == "" || name == placement.Pool {
		return rest, e, nil
	}
	_, owner, closeOwner, err := openTenantStorePool(ctx, e, stderr)
	if err != nil {
		return nil, e, err
	}
	defer closeOwner()
	p, err := placement.NewRegistry(owner).Get(ctx, name)
	if err != nil {
		return nil, e, err
	}
	conns, err := placementConns(p.URL)
	if err != nil {
		return nil, e, err
	}
	over := map[string]string{"DATABASE_URL": conns.owner, "STRATA_APP_DATABASE_URL": conns.app.url, "STRATA_PROJECTOR_DATABASE_URL": conns.proj.url}
	base := e.get
	return rest, env{mods: e.mods, get: func(k string) string {
		if v, ok := over[k]; ok {
			return v
		}
		return base(k)
	}}, nil
}
