package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// Registrations are the load's guarded commands (issue 31): the customers
// module (examples/customers, served by the strata binary with the other
// examples) registers a customer only with an address no other customer
// of the tenant holds, by a read of the events tagged with the address
// and an append on the condition that none was appended since. Clients
// race for a few addresses per tenant, so that one registration of each
// address is created (201) and the others are refused (422), under the
// same faults as the order commands; checkConditions judges the history.

// registerKind is the Kind of a registration in the history.
const registerKind = "register"

// register registers a new customer (one per registration: a customer
// registers once) on one of the current round's addresses of a random
// tenant, and runs it as execute runs an order command. n counts the
// client's registrations.
func (l *loadRun) register(ctx context.Context, rng *rand.Rand, client, n int) {
	tenant := l.w.tenants[rng.IntN(len(l.w.tenants))]
	round := n * l.cfg.EmailRounds / l.cfg.Registrations
	// Lower case throughout: the address is the one the rule compares
	// (customer.NormalizeEmail keeps the local part, lowers the domain).
	email := fmt.Sprintf("u%d.r%d@%s.example", rng.IntN(l.cfg.Emails), round, tenant)
	key := fmt.Sprintf("c%d-r%d", client, n)
	id := "cu-" + key
	body, _ := json.Marshal(map[string]string{"name": "Chaos " + key, "email": email})
	l.executeOp(ctx, rng, &Op{Client: client, Tenant: tenant, Customer: id, Email: email, Kind: registerKind, Key: key,
		Start: time.Now(), Outcome: Info, cmd: command{registerKind, http.MethodPost, "/v1/customers/" + id + "/register", body}})
}
