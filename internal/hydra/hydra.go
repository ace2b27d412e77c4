// Package hydra runs a private Ory Hydra, a real OpenID Connect provider,
// for the tests of strata's provider tokens: it issues JWT access tokens by
// the client credentials grant, publishes its keys as a JWKS, and rotates
// and drops keys through its admin API.
//
// The binary is $HYDRA, else bin/hydra at the module's root (`make deps`
// builds it), else it is built there from internal/hydra/tool, a module of
// its own that pins the version (a few minutes the first time on a fresh
// machine, then Go's build cache). Hydra keeps its state in a PostgreSQL
// database the caller gives it; it listens on free loopback ports, logs to
// its directory, and is killed when the test ends.
package hydra

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-es/strata/internal/toolbuild"
)

// EnvBinary names the variable that points at a hydra binary.
const EnvBinary = "HYDRA"

// AccessTokenKeys is the key set Hydra signs JWT access tokens with.
const AccessTokenKeys = "hydra.jwt.access-token"

// Server is a running Hydra.
type Server struct {
	// Issuer is its issuer URL (with the trailing slash Hydra puts in iss).
	Issuer string
	// Public and Admin are the base URLs of its two listeners.
	Public, Admin string
	dir           string
	cmd           *exec.Cmd
}

// Binary returns the hydra binary, building it when there is none.
func Binary() (string, error) {
	return toolbuild.Binary(EnvBinary, "hydra", func(root, bin string) error {
		return toolbuild.GoBuild(root, filepath.Join("internal", "hydra", "tool"), "github.com/ory/hydra/v2", bin)
	})
}

// Start migrates the database at dsn for Hydra and starts it; it is
// stopped when t ends. Access tokens are JWTs, scopes in scp.
func Start(t testing.TB, dsn string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ports := freePorts(t, 2)
	s := &Server{
		Issuer: fmt.Sprintf("http://127.0.0.1:%d/", ports[0]),
		Public: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		Admin:  fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		dir:    dir,
	}
	env := append(os.Environ(),
		"DSN="+dsn,
		"SECRETS_SYSTEM=strata-tests-hydra-system-secret-0123456789",
		"URLS_SELF_ISSUER="+s.Issuer,
		"STRATEGIES_ACCESS_TOKEN=jwt",
		"SERVE_PUBLIC_HOST=127.0.0.1", "SERVE_PUBLIC_PORT="+strconv.Itoa(ports[0]),
		"SERVE_ADMIN_HOST=127.0.0.1", "SERVE_ADMIN_PORT="+strconv.Itoa(ports[1]),
		"LOG_LEVEL=warn",
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mig := exec.CommandContext(ctx, bin, "migrate", "sql", "up", "-e", "--yes")
	mig.Env = env
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("hydra migrate: %v\n%s", err, tail(out))
	}
	logf, err := os.Create(filepath.Join(dir, "hydra.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, "serve", "all", "--dev")
	s.cmd.Env, s.cmd.Stdout, s.cmd.Stderr = env, logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("hydra serve: %v", err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		logf.Close()
	})
	for {
		resp, err := http.Get(s.Admin + "/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ctx.Err() != nil {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("hydra did not become ready: %v\n%s", err, tail(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func freePorts(t testing.TB, n int) []int {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Client is an OAuth 2.0 client of the client credentials grant.
type Client struct {
	ID, Secret string
	Scopes     []string // what it may ask for
	Audience   []string // what it may ask for
}

// CreateClient registers c through the admin API.
func (s *Server) CreateClient(t testing.TB, c Client) {
	t.Helper()
	body := map[string]any{"client_id": c.ID, "client_secret": c.Secret, "grant_types": []string{"client_credentials"},
		"scope": strings.Join(c.Scopes, " "), "audience": c.Audience, "token_endpoint_auth_method": "client_secret_post"}
	s.call(t, http.MethodPost, s.Admin+"/admin/clients", body, http.StatusCreated, nil)
}

// Token obtains an access token for c by the client credentials grant.
func (s *Server) Token(t testing.TB, c Client, scopes []string, audience string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ID}, "client_secret": {c.Secret},
		"scope": {strings.Join(scopes, " ")}, "audience": {audience}}
	resp, err := http.PostForm(s.Public+"/oauth2/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("hydra token for %s: %s %s", c.ID, resp.Status, b)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(b, &tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("hydra token: %v %s", err, b)
	}
	return tok.AccessToken
}

// AddKey makes Hydra generate a key in set; it signs what it issues from
// then on.
func (s *Server) AddKey(t testing.TB, set, kid, alg string) {
	t.Helper()
	s.call(t, http.MethodPost, s.Admin+"/admin/keys/"+set, map[string]string{"alg": alg, "use": "sig", "kid": kid}, http.StatusCreated, nil)
}

// DeleteKey removes the key kid from set: Hydra stops publishing it.
func (s *Server) DeleteKey(t testing.TB, set, kid string) {
	t.Helper()
	s.call(t, http.MethodDelete, s.Admin+"/admin/keys/"+set+"/"+url.PathEscape(kid), nil, http.StatusNoContent, nil)
}

// KeyIDs lists the key IDs of set.
func (s *Server) KeyIDs(t testing.TB, set string) []string {
	t.Helper()
	var ks struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	s.call(t, http.MethodGet, s.Admin+"/admin/keys/"+set, nil, http.StatusOK, &ks)
	var ids []string
	for _, k := range ks.Keys {
		ids = append(ids, k.Kid)
	}
	return ids
}

func (s *Server) call(t testing.TB, method, u string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, u, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("hydra %s %s: %s %s", method, u, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("hydra %s %s: %v", method, u, err)
		}
	}
}
