package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
)

// strata token issues nothing the API would refuse: no lifetime beyond
// auth.MaxLifetime.
func TestTokenTTLBound(t *testing.T) {
	vars := map[string]string{"STRATA_JWT_SECRET": "token-ttl-test-secret-0123456789abcdef"}
	for _, tc := range []struct {
		ttl  string
		code int
	}{
		{"744h", exitOK}, {"24h", exitOK}, {"744h1s", exitUsage}, {"8760h", exitUsage}, {"0s", exitUsage}, {"-1h", exitUsage},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"token", "--tenant", "acme", "--ttl", tc.ttl}, testEnv(vars), &out, &errb)
		if code != tc.code {
			t.Errorf("token --ttl %s exited %d (%s), want %d", tc.ttl, code, strings.TrimSpace(errb.String()), tc.code)
			continue
		}
		if code != exitOK {
			continue
		}
		v, err := auth.NewVerifier([]byte(vars["STRATA_JWT_SECRET"]), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := v.Parse(strings.TrimSpace(out.String()))
		if err != nil {
			t.Errorf("token --ttl %s printed a token the API refuses: %v", tc.ttl, err)
			continue
		}
		want, _ := time.ParseDuration(tc.ttl)
		if d := time.Until(c.ExpiresAt); d > want || d < want-time.Minute {
			t.Errorf("token --ttl %s expires in %s", tc.ttl, d)
		}
	}
}
