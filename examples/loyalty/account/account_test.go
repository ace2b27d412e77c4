package account_test

import (
	"errors"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/commandtest"

	"example.com/loyalty/account"
	"example.com/loyalty/accountcmd"
)

var at = commandtest.DefaultNow

func earned(points int64) account.Earned {
	return account.Earned{Customer: "c-1", Points: points, Reason: "order", At: at}
}

func TestEarnAndRedeem(t *testing.T) {
	t.Parallel()
	reg := accountcmd.Registry
	commandtest.For(t, accountcmd.Aggregate).Codecs(reg).
		When(accountcmd.Earn{Customer: "c-1", Points: 50, Reason: "order"}).
		Then(earned(50))
	commandtest.For(t, accountcmd.Aggregate).Codecs(reg).
		Given(earned(50)).
		When(accountcmd.Redeem{Customer: "c-1", Points: 30}).
		Then(account.Redeemed{Customer: "c-1", Points: 30, At: at})
}

func TestRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		given []any
		max   int64
		when  accountcmd.Command
		want  error
	}{
		{"redeem more than the balance", []any{earned(10)}, 0, accountcmd.Redeem{Customer: "c-1", Points: 11}, account.ErrInsufficient},
		{"redeem over the setting's limit", []any{earned(100)}, 20, accountcmd.Redeem{Customer: "c-1", Points: 21, MaxPerRedemption: 20}, account.ErrOverRedeem},
		{"redeem with no account", nil, 0, accountcmd.Redeem{Customer: "c-1", Points: 1}, account.ErrNotFound},
		{"no points", nil, 0, accountcmd.Earn{Customer: "c-1", Points: 0}, account.ErrPoints},
		{"over the balance cap", []any{earned(account.MaxPoints)}, 0, accountcmd.Earn{Customer: "c-1", Points: 1}, account.ErrBalanceCap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := commandtest.For(t, accountcmd.Aggregate)
			for _, g := range tc.given {
				s = s.Given(g.(account.Earned))
			}
			s.When(tc.when).ThenError(tc.want)
		})
	}
	if _, err := (&account.Account{}).Earn("bad id!", 1, "", time.Now()); err == nil || errors.Is(err, account.ErrPoints) {
		t.Errorf("a customer ID outside the entity pattern: %v", err)
	}
}
