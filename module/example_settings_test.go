package module_test

import (
	"fmt"
	"time"

	"github.com/strata-es/strata/module"
)

// A module declares its settings; the entry point reads them from the
// environment (an unset or blank variable takes its Default) and hands the
// values to the module's Commands and Processes as Deps.Settings. A test
// of the module builds them with its own getenv, as here.
func ExampleSettings() {
	billing := module.Module{Name: "billing", Settings: []module.Setting{
		{Name: "BILLING_GRACE_PERIOD", Default: "72h", Doc: "how long an unpaid invoice waits before it is cancelled"},
		{Name: "BILLING_WEBHOOK_URL", Doc: "where paid invoices are announced (none: not announced)"},
	}}
	env := map[string]string{"BILLING_WEBHOOK_URL": "https://billing.example/paid"}
	s := module.NewSettings(billing, func(name string) string { return env[name] })

	grace, err := time.ParseDuration(s.Get("BILLING_GRACE_PERIOD"))
	if err != nil {
		fmt.Println("BILLING_GRACE_PERIOD:", err)
		return
	}
	fmt.Println("grace period:", grace)
	fmt.Println("webhook:", s.Get("BILLING_WEBHOOK_URL"))

	// Reading a setting the module did not declare is a programming error
	// (strata config would not list it): Get panics.
	defer func() { fmt.Println("undeclared:", recover()) }()
	s.Get("BILLING_SECRET")
	// Output:
	// grace period: 72h0m0s
	// webhook: https://billing.example/paid
	// undeclared: module billing reads setting BILLING_SECRET, which it does not declare in Module.Settings
}
