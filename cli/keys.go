package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/personal"
	"github.com/strata-es/strata/placement"
)

const keysUsage = `strata keys — the keys of personal data (docs/personal-data.md); needs the owner connection (DATABASE_URL)

Usage:
  strata keys status [--json]                 per database: the key-encryption keys and how many data keys each wraps
  strata keys rotate [--grace 10m] [--json]   re-wrap every data key under a new key-encryption key, in the control
                                              plane and every placement; no event is touched

rotate makes a new key-encryption key the current one in each database, or,
with STRATA_KEK_FILE or STRATA_KEK_AWS_KMS_KEY set, the file's or KMS's key; then it re-wraps every tenant's data
keys under it and deletes the keys that wrap none any more and stopped being
current longer than --grace ago (every serving process has read the new one).
A rotation stopped halfway is finished by running it again.
`

func cmdKeys(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return exitUsage
	}
	sub := args[0]
	if sub == "help" || sub == "-h" || sub == "--help" {
		fmt.Fprint(stdout, keysUsage)
		return exitOK
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	grace := fs.Duration("grace", 10*time.Minute, "rotate: delete a retired key-encryption key only this long after it stopped being current")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 || sub != "status" && sub != "rotate" {
		fmt.Fprintf(stderr, "strata keys: unknown subcommand or arguments %q\n\n%s", args, keysUsage)
		return exitUsage
	}
	file, err := externalKEK(ctx, e)
	if err != nil {
		fmt.Fprintln(stderr, "strata keys:", err)
		return exitFailure
	}
	_, owner, closeOwner, err := openTenantStorePool(ctx, e, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "strata keys:", err)
		return exitFailure
	}
	defer closeOwner()
	list, err := placement.NewRegistry(owner).List(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "strata keys: read the placements:", err)
		return exitFailure
	}
	type report struct {
		Database string             `json:"database"`
		Current  string             `json:"current_kek"`
		Keys     map[string]int     `json:"data_keys_by_kek"`
		Rotation *personal.Rotation `json:"rotation,omitempty"`
	}
	var out []report
	failed := 0
	for _, p := range list {
		q := owner
		if p.Name != placement.Pool {
			if q, err = db.OpenPool(ctx, p.URL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 2, AppName: "strata-keys"}); err != nil {
				fmt.Fprintf(stderr, "strata keys: placement %s: %v\n", p.Name, pgMessage(err))
				failed++
				continue
			}
		}
		r := report{Database: p.Name}
		err := func() error {
			if q != owner {
				defer q.Close()
			}
			tenants, err := personal.Tenants(ctx, q)
			if err != nil {
				return err
			}
			if sub == "rotate" {
				rot, err := personal.Rotate(ctx, q, file, tenants, personal.RotateOptions{Grace: *grace, Progress: func(tenant string, keys int) {
					if !*asJSON && keys > 0 {
						fmt.Fprintf(stdout, "%s: tenant %s: %d data keys re-wrapped\n", p.Name, tenant, keys)
					}
				}})
				if err != nil {
					return err
				}
				r.Rotation = &rot
			}
			cur, err := personal.DatabaseKEKs(ctx, q, file).Current()
			if err != nil {
				return err
			}
			r.Current = cur.ID()
			r.Keys, err = personal.KeyCounts(ctx, q, tenants)
			return err
		}()
		if err != nil {
			fmt.Fprintf(stderr, "strata keys: %s: %v\n", p.Name, err)
			failed++
			continue
		}
		out = append(out, r)
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(map[string]any{"databases": out}); err != nil {
			return exitFailure
		}
	} else {
		for _, r := range out {
			var parts []string
			ids := make([]string, 0, len(r.Keys))
			for id := range r.Keys {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				parts = append(parts, fmt.Sprintf("%s: %d", id, r.Keys[id]))
			}
			line := fmt.Sprintf("%s: current key-encryption key %s; data keys by KEK: {%s}", r.Database, r.Current, strings.Join(parts, ", "))
			if r.Rotation != nil {
				line += fmt.Sprintf("; rotated %d data keys of %d tenants to %s, retired %v", r.Rotation.Keys, r.Rotation.Tenants, r.Rotation.To, r.Rotation.Retired)
			}
			fmt.Fprintln(stdout, line)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "strata keys: %d of %d databases failed\n", failed, len(list))
		return exitFailure
	}
	return exitOK
}
