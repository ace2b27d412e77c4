package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/module"
)

// TestMain doubles as the strata binary: with STRATA_TEST_AS_MAIN=1 the
// test binary runs the command line (with the example modules, as
// cmd/strata does) instead of the tests, so process-level tests
// (signals, kill -9) can start real strata processes without a build step.
func TestMain(m *testing.M) {
	if os.Getenv("STRATA_TEST_AS_MAIN") == "1" {
		if _, set := os.LookupEnv("STRATA_REQUIRE_TENANT_DIRECTORY"); !set {
			os.Setenv("STRATA_REQUIRE_TENANT_DIRECTORY", "false") // as testEnv: the tests' tenants are not provisioned
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, strings.Fields(os.Getenv("STRATA_TEST_ARGS")), os.Getenv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	pgtest.Main(m)
}

// testEnv returns a getenv for run: the given variables and nothing else.
func testEnv(vars map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := vars[k]; ok || k != "STRATA_PROCESSES" && k != "STRATA_REQUIRE_TENANT_DIRECTORY" {
			return v
		}
		if k == "STRATA_REQUIRE_TENANT_DIRECTORY" {
			// Every test database is a new installation, which requires the
			// tenant directory; the engine's tests use tenants they never
			// provision. The directory's tests (tenants_test.go) turn it on.
			return "false"
		}
		// The engine's tests drive orders alone: the fulfilment process
		// manager would cancel orders whose stock was never received,
		// racing the tests' own commands. Its tests turn it on.
		return "none"
	}
}

// startServe runs `strata serve` in-process on a free port and returns its
// base URL, the banner lines it printed, and a stop function that returns
// the exit code.
func startServe(t *testing.T, vars map[string]string, args ...string) (baseURL string, banner []string, stop func() int) {
	t.Helper()
	return startServeOf(t, examples.All(), vars, args...)
}

// startServeOf is startServe with the modules mods.
func startServeOf(t *testing.T, mods []module.Module, vars map[string]string, args ...string) (baseURL string, banner []string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), testEnv(vars), pw, &stderr, mods...)
		pw.Close()
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(60 * time.Second)
	urlPattern := regexp.MustCompile(`serving on (https?://\S+)`)
	for baseURL == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited early (code %d): %s", <-code, stderr.String())
			}
			banner = append(banner, l)
			if m := urlPattern.FindStringSubmatch(l); m != nil {
				baseURL = m[1]
			}
		case <-deadline:
			t.Fatalf("serve did not start: %s", stderr.String())
		}
	}
	watchOpenAPI(t, baseURL) // every response of this server is checked against the document
	// Collect the rest of the banner (printed right after the URL line).
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				done = true
				break
			}
			banner = append(banner, l)
		case <-time.After(300 * time.Millisecond):
			done = true
		}
	}
	go func() {
		for range lines {
		}
	}()
	return baseURL, banner, func() int {
		cancel()
		select {
		case c := <-code:
			return c
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop within 30 s of cancellation")
			return -1
		}
	}
}

// TestServePrintedCurlWorks runs serve against a test database and executes
// the curl line it prints, as a user would paste it.
func TestServePrintedCurlWorks(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir()}
	base, banner, stop := startServe(t, vars)
	var curl string
	for _, l := range banner {
		if strings.HasPrefix(strings.TrimSpace(l), "curl ") {
			curl = strings.TrimSpace(l)
		}
	}
	if curl == "" {
		t.Fatalf("no curl line in the banner:\n%s", strings.Join(banner, "\n"))
	}
	req := parseCurl(t, curl)
	if !strings.HasPrefix(req.URL.String(), base) {
		t.Fatalf("curl targets %s, server is at %s", req.URL, base)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || !strings.Contains(string(body), `"position"`) {
		t.Fatalf("printed curl answered %d %s", res.StatusCode, body)
	}
	for _, p := range []string{"/livez", "/readyz"} {
		res, err := http.Get(base + p)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, res, err)
		}
		res.Body.Close()
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d after cancellation, want 0", code)
	}
}

// parseCurl understands the one curl shape the banner prints:
// curl -s -X METHOD URL -H 'K: V' ... -d 'BODY'
func parseCurl(t *testing.T, line string) *http.Request {
	t.Helper()
	var args []string
	for rest := line; rest != ""; {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			break
		}
		if rest[0] == '\'' {
			end := strings.IndexByte(rest[1:], '\'')
			if end < 0 {
				t.Fatalf("unbalanced quote in %s", line)
			}
			args = append(args, rest[1:end+1])
			rest = rest[end+2:]
			continue
		}
		end := strings.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		args = append(args, rest[:end])
		rest = rest[end:]
	}
	method, url, body := "GET", "", ""
	headers := http.Header{}
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "-s":
		case "-X":
			i++
			method = args[i]
		case "-H":
			i++
			k, v, _ := strings.Cut(args[i], ":")
			headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case "-d":
			i++
			body = args[i]
		default:
			url = args[i]
		}
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = headers
	return req
}

func TestTokenAndMigrateCommands(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir()}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"token", "--tenant", "acme", "--scope", "admin"}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("token: %d %s", code, errb.String())
	}
	if strings.Count(strings.TrimSpace(out.String()), ".") != 2 {
		t.Fatalf("token printed %q", out.String())
	}
	if code := run(context.Background(), []string{"token"}, testEnv(vars), &out, &errb); code != exitUsage {
		t.Fatalf("token without --tenant exited %d, want %d", code, exitUsage)
	}
	out.Reset()
	if code := run(context.Background(), []string{"migrate", "status"}, testEnv(vars), &out, &errb); code != exitOK || !strings.Contains(out.String(), "pending") {
		t.Fatalf("migrate status on an empty database: %d %q %s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"migrate", "up"}, testEnv(vars), &out, &errb); code != exitOK {
		t.Fatalf("migrate up: %d %s", code, errb.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"migrate", "status"}, testEnv(vars), &out, &errb); code != exitOK || strings.Contains(out.String(), "pending") {
		t.Fatalf("migrate status after up: %q", out.String())
	}
	if code := run(context.Background(), []string{"bogus"}, testEnv(vars), &out, &errb); code != exitUsage {
		t.Fatalf("unknown command exited %d", code)
	}
}
