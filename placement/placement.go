// Package placement keeps the registry of placements (ARCHITECTURE
// decision 14, docs/scaling.md "Placements"): the PostgreSQL databases a
// tenant's data may live in, each with strata's schema and its own global
// log, runners, checkpoints, dead letters and process managers. The
// registry is the placements table of the control-plane database (the
// placement Pool itself, migration 013); only the owner reads or writes it,
// since a placement's URL may carry a password.
package placement

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
)

// Pool is the placement of the control-plane database itself: the shared
// database every tenant lives in unless placed elsewhere.
const Pool = "pool"

// Statuses of a placement.
const (
	StatusActive  = "active"  // tenants may be placed there
	StatusRetired = "retired" // no tenant may be placed there
)

// Placement is one row of the registry.
type Placement struct {
	Name      string    `json:"name"`
	URL       string    `json:"-"` // the owner's URL of its database ("" for Pool)
	Status    string    `json:"status"`
	Epoch     int64     `json:"epoch"`
	Note      string    `json:"note"`
	AddedAt   time.Time `json:"added_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Redacted is the placement's URL without its password, for output.
func (p Placement) Redacted() string { return Redact(p.URL) }

// Errors of the registry, besides the database's.
var (
	ErrNotFound = fmt.Errorf("%w: no such placement", domain.ErrNotFound)
	// ErrConflict: a placement of that name exists with another URL.
	ErrConflict = fmt.Errorf("%w: a placement of that name exists with another URL", domain.ErrRejected)
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// ValidName checks a placement's name (what tenants.placement allows).
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: placement name %q must match [a-z][a-z0-9_-]{0,62}", domain.ErrInvalid, name)
	}
	return nil
}

// Registry reads and writes the placements table on an owner pool.
type Registry struct {
	pool *pgxpool.Pool
}

// NewRegistry returns the registry on the control-plane database's owner
// connection (a login that may become strata_owner).
func NewRegistry(owner *pgxpool.Pool) *Registry { return &Registry{pool: owner} }

func (r *Registry) ownerTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return db.OwnerTx(ctx, r.pool, fn)
}

const columns = `name, url, status, epoch, note, added_at, updated_at`

func scan(row pgx.Row) (Placement, error) {
	var p Placement
	err := row.Scan(&p.Name, &p.URL, &p.Status, &p.Epoch, &p.Note, &p.AddedAt, &p.UpdatedAt)
	return p, err
}

// List returns every placement, Pool first.
func (r *Registry) List(ctx context.Context) ([]Placement, error) {
	var out []Placement
	err := r.ownerTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+columns+` FROM placements ORDER BY name <> 'pool', name`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Placement, error) { return scan(row) })
		return err
	})
	return out, err
}

// Get returns one placement.
func (r *Registry) Get(ctx context.Context, name string) (Placement, error) {
	var p Placement
	err := r.ownerTx(ctx, func(tx pgx.Tx) (err error) {
		p, err = scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM placements WHERE name = $1`, name))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Placement{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return p, err
}

// Add registers a placement; adding one again with the same URL is a
// no-op (created false), with another URL ErrConflict. The caller has
// migrated the placement's database first (Prepare).
func (r *Registry) Add(ctx context.Context, name, rawURL, note string) (p Placement, created bool, err error) {
	if err := ValidName(name); err != nil {
		return Placement{}, false, err
	}
	if name == Pool {
		return Placement{}, false, fmt.Errorf("%w: %q is the control-plane database's own placement; it is always there", domain.ErrInvalid, Pool)
	}
	if rawURL == "" {
		return Placement{}, false, fmt.Errorf("%w: a placement needs the URL of its database", domain.ErrInvalid)
	}
	err = r.ownerTx(ctx, func(tx pgx.Tx) error {
		p, err = scan(tx.QueryRow(ctx, `INSERT INTO placements (name, url, note) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO NOTHING RETURNING `+columns, name, rawURL, note))
		if err == nil {
			created = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		p, err = scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM placements WHERE name = $1`, name))
		if err != nil {
			return err
		}
		if p.URL != rawURL {
			return fmt.Errorf("%w: %s is %s", ErrConflict, name, p.Redacted())
		}
		return nil
	})
	return p, created, err
}

// Tenants counts the tenants of each placement (every status but erased).
func (r *Registry) Tenants(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	err := r.ownerTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT placement, count(*) FROM tenants WHERE status <> 'erased' GROUP BY placement`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var n int
			if err := rows.Scan(&name, &n); err != nil {
				return err
			}
			out[name] = n
		}
		return rows.Err()
	})
	return out, err
}

// Redact drops the password of a PostgreSQL URL (key=value strings are
// shown as their host and database only).
func Redact(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		cfg, perr := pgx.ParseConfig(raw)
		if perr != nil {
			return "(unparseable URL)"
		}
		return fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	return u.String()
}
