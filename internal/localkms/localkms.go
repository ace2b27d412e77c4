// Package localkms runs a private local-kms (github.com/nsmithuk/local-kms,
// an implementation of the AWS KMS API) for the tests of personal/awskms.
//
// The binary is $LOCAL_KMS, else bin/local-kms at the module's root (`make
// deps` builds it), else it is built there from internal/localkms/tool, a
// module of its own that pins its version. The server keeps its data in the
// test's temporary directory, listens on a free port, and is killed when
// the test ends.
package localkms

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/strata-es/strata/internal/toolbuild"
)

// EnvBinary names the variable that points at a local-kms binary.
const EnvBinary = "LOCAL_KMS"

// Region is the region the server answers for.
const Region = "eu-west-2"

// The credentials the tests sign with (local-kms checks none).
const (
	AccessKey = "strata-test"
	SecretKey = "strata-test-secret"
)

// Server is a running local-kms.
type Server struct {
	// Endpoint is its URL (http://127.0.0.1:<port>).
	Endpoint string
}

// Binary returns the local-kms binary, building it when there is none.
func Binary() (string, error) {
	return toolbuild.Binary(EnvBinary, "local-kms", func(root, bin string) error {
		return toolbuild.GoBuild(root, filepath.Join("internal", "localkms", "tool"), "github.com/nsmithuk/local-kms", bin)
	})
}

// Client returns a KMS client of the server, with the test credentials
// it accepts.
func (s *Server) Client() *kms.Client {
	return kms.New(kms.Options{Region: Region, BaseEndpoint: aws.String(s.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, "")})
}

// NewKey makes a symmetric encryption key on the server and returns its
// ID and ARN.
func (s *Server) NewKey(ctx context.Context, t testing.TB) (id, arn string) {
	t.Helper()
	out, err := s.Client().CreateKey(ctx, &kms.CreateKeyInput{Description: aws.String("strata test KEK")})
	if err != nil {
		t.Fatal(err)
	}
	return *out.KeyMetadata.KeyId, *out.KeyMetadata.Arn
}

// Start starts a local-kms for the test; it is killed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "local-kms.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "KMS_REGION="+Region, "KMS_DATA_PATH="+filepath.Join(dir, "data"),
		"KMS_SEED_PATH="+filepath.Join(dir, "no-seed.yaml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("localkms: start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	s := &Server{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res, err := http.Get(s.Endpoint)
		if err == nil {
			res.Body.Close()
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("localkms: not answering on %s after 15s: %v\n%s", s.Endpoint, err, log)
		}
	}
}
