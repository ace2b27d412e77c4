package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// consoleTTL is the default lifetime of a console login token: the login
// URL is meant to be opened at once, and the console keeps the token in
// the tab only.
const consoleTTL = 15 * time.Minute

func cmdToken(args []string, e env, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "tenant ID (required; with --console default "+devTenant+"), [a-z0-9-]{1,63}")
	sub := fs.String("sub", "dev", "subject")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime, at most 744h (31 days); with --console default 15m")
	scope := fs.String("scope", "", "space- or comma-separated scopes: admin (the tenant's /v1/admin routes), platform (the tenant directory, /v1/platform); with --console default admin")
	cross := fs.Bool("cross-tenant", false, "allow admin views across tenants (audited)")
	consoleURL := fs.Bool("console", false, "print a login URL of the operator's console (docs/console.md): the token rides in the URL's fragment, which browsers never send to the server")
	addr := fs.String("addr", e.str("STRATA_ADDR", ":8080"), "with --console: the address strata serve listens on")
	asJSON := fs.Bool("json", false, "print {\"token\",\"expires_at\"[,\"console_url\"]} as JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *consoleURL {
		if !set["tenant"] {
			*tenant = devTenant
		}
		if !set["ttl"] {
			*ttl = consoleTTL
		}
		if !set["scope"] {
			*scope = auth.ScopeAdmin
		}
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
	base := ""
	if *consoleURL {
		if base, err = consoleBase(*addr); err != nil {
			fmt.Fprintln(stderr, "strata token:", err)
			return exitUsage
		}
	}
	if e.str("STRATA_OIDC_ISSUER", "") != "" {
		// serve would refuse the token: it verifies the provider's alone.
		fmt.Fprintln(stderr, "strata token: this installation verifies the identity provider's tokens (STRATA_OIDC_ISSUER); obtain one from the provider (docs/operations.md)")
		return exitUsage
	}
	secret, _, err := e.jwtSecret()
	if err != nil {
		fmt.Fprintln(stderr, "strata token:", err)
		return exitFailure
	}
	expires := time.Now().Add(*ttl).UTC().Truncate(time.Second)
	tok, err := auth.Sign(secret, auth.Claims{Subject: *sub, Tenant: t, Scopes: strings.FieldsFunc(*scope, func(r rune) bool { return r == ',' || r == ' ' }), CrossTenant: *cross}, *ttl)
	if err != nil {
		fmt.Fprintln(stderr, "strata token:", err)
		return exitFailure
	}
	login := ""
	if *consoleURL {
		login = base + "/console/#token=" + tok
	}
	switch {
	case *asJSON:
		out := map[string]string{"token": tok, "expires_at": expires.Format(time.RFC3339)}
		if login != "" {
			out["console_url"] = login
		}
		raw, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(stdout, string(raw))
	case login != "":
		fmt.Fprintln(stdout, login)
		fmt.Fprintf(stderr, "open it in a browser within %s (tenant %s, scopes %q); the token is in the fragment, which the browser does not send to the server\n", *ttl, t, *scope)
	default:
		fmt.Fprintln(stdout, tok)
	}
	return exitOK
}

// consoleBase turns a listen address (":8080", "0.0.0.0:8080",
// "host:8080", "http://host:8080") into the console's base URL.
func consoleBase(addr string) (string, error) {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return strings.TrimRight(addr, "/"), nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("--addr %q: want host:port or :port (the address strata serve listens on)", addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
