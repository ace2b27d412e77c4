package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/auth"
)

func cmdToken(args []string, e env, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "tenant ID (required), [a-z0-9-]{1,63}")
	sub := fs.String("sub", "dev", "subject")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime, at most 744h (31 days)")
	scope := fs.String("scope", "", "space- or comma-separated scopes: admin (the tenant's /v1/admin routes), platform (the tenant directory, /v1/platform)")
	cross := fs.Bool("cross-tenant", false, "allow admin views across tenants (audited)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	t, err := domain.ParseTenantID(*tenant)
	if err != nil {
		fmt.Fprintln(stderr, "strata token: --tenant is required and must match [a-z0-9-]{1,63}")
		return exitUsage
	}
	if *ttl <= 0 || *ttl > auth.MaxLifetime {
		fmt.Fprintf(stderr, "strata token: --ttl must be positive and at most %s (31 days): the API refuses longer-lived tokens\n", auth.MaxLifetime)
		return exitUsage
	}
	secret, _, err := e.jwtSecret()
	if err != nil {
		fmt.Fprintln(stderr, "strata token:", err)
		return exitFailure
	}
	tok, err := auth.Sign(secret, auth.Claims{Subject: *sub, Tenant: t, Scopes: strings.FieldsFunc(*scope, func(r rune) bool { return r == ',' || r == ' ' }), CrossTenant: *cross}, *ttl)
	if err != nil {
		fmt.Fprintln(stderr, "strata token:", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, tok)
	return exitOK
}
