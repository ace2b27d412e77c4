package accountview_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/commandtest"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections/projectiontest"

	"example.com/loyalty/account"
	"example.com/loyalty/accountcmd"
	"example.com/loyalty/accountview"
)

func TestMain(m *testing.M) { projectiontest.Main(m) }

// history decides a deterministic mix of earn and redeem commands for a
// few tenants and customers with the aggregate itself, so every event is
// one the write side could have stored.
func history(t *testing.T, n int) []projectiontest.Recorded {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 1))
	accounts := map[string]*account.Account{}
	at := commandtest.DefaultNow
	var out []projectiontest.Recorded
	for len(out) < n {
		tenant, customer := fmt.Sprintf("t-%d", rng.IntN(2)), fmt.Sprintf("c-%d", rng.IntN(4))
		a := accounts[tenant+"/"+customer]
		if a == nil {
			a, _ = account.Load(nil)
			accounts[tenant+"/"+customer] = a
		}
		var cmd accountcmd.Command = accountcmd.Earn{Customer: customer, Points: 1 + rng.Int64N(100), Reason: "order"}
		if rng.IntN(3) == 0 {
			cmd = accountcmd.Redeem{Customer: customer, Points: 1 + rng.Int64N(80)}
		}
		at = at.Add(time.Duration(1+rng.IntN(300)) * time.Second)
		evs, err := cmd.Decide(a, at)
		if err != nil {
			continue // a rule said no: nothing is stored
		}
		for _, p := range evs {
			if err := a.Apply(p); err != nil {
				t.Fatal(err)
			}
			typ, v, data, err := accountcmd.Registry.Encode(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, projectiontest.Recorded{Tenant: tenant, Stream: account.StreamID(customer), Version: a.Version,
				Type: typ, SchemaVersion: v, Data: data})
		}
	}
	return out
}

// TestBalances runs the projection over a history in every way the engine
// runs it (event by event, set-based if it were one, rebuilt into a shadow
// table and swapped in) and compares the rows with the golden file
// (STRATA_REWRITE_GOLDEN=1 go test ./... writes it).
func TestBalances(t *testing.T) {
	projectiontest.Check(t, projectiontest.Config{
		Projection: accountview.NewBalances(""),
		Registry:   event.NewRegistry(account.Codecs()...),
		Lines:      []db.Line{accountview.Migrations},
		Events:     history(t, 60),
		Golden:     filepath.Join("testdata", "golden", "balances.txt"),
	})
}
