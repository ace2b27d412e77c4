// Package seaweed runs a private SeaweedFS with its S3 gateway, a real
// S3-compatible object store, for the tests of the archive store (package
// tenancy/archive).
//
// The binary is $WEED, else bin/weed at the module's root (`make deps`
// builds it), else it is built there by build.sh (a few minutes the first
// time on a fresh machine, then Go's caches). The server keeps its data in
// the test's temporary directory, listens on free loopback ports, logs to
// that directory, and is killed when the test ends.
package seaweed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/strata-es/strata/internal/toolbuild"
)

// EnvBinary names the variable that points at a weed binary.
const EnvBinary = "WEED"

// The credentials of the one identity the server knows.
const (
	AccessKey = "strata-test"
	SecretKey = "strata-test-secret"
)

// Server is a running SeaweedFS.
type Server struct {
	// Endpoint is the S3 gateway's URL (http://127.0.0.1:<port>).
	Endpoint string
	Dir      string
}

// Binary returns the weed binary, building it when there is none (by
// build.sh).
func Binary() (string, error) {
	return toolbuild.Binary(EnvBinary, "weed", func(root, bin string) error {
		cmd := exec.Command("/bin/sh", filepath.Join(root, "internal", "seaweed", "build.sh"), bin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("seaweed: internal/seaweed/build.sh (or run `make deps`): %v\n%s", err, out)
		}
		return nil
	})
}

// freePorts returns n loopback ports that are free, each with its gRPC
// twin (SeaweedFS listens on port+10000 too).
func freePorts(n int) ([]int, error) {
	var out []int
	for tries := 0; len(out) < n && tries < 200; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p+10000 > 65535 {
			continue
		}
		twin, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		twin.Close()
		out = append(out, p)
	}
	if len(out) < n {
		return nil, errors.New("seaweed: no free loopback ports")
	}
	return out, nil
}

// Start starts a SeaweedFS (master, volume, filer and S3 gateway in one
// process) and waits until an object can be written into bucket, which
// it creates. It is stopped when t ends.
func Start(t testing.TB, bucket string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ports, err := freePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"identities":[{"name":"strata","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","List","Tagging","Write"]}]}`, AccessKey, SecretKey)
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "server", "-dir="+data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+strconv.Itoa(ports[0]), "-volume.port="+strconv.Itoa(ports[1]), "-filer.port="+strconv.Itoa(ports[2]),
		"-volume.max=8", "-master.volumeSizeLimitMB=64",
		"-s3", "-s3.port="+strconv.Itoa(ports[3]), "-s3.config="+filepath.Join(dir, "s3.json"),
		// Its Iceberg and Lance endpoints listen on fixed ports otherwise,
		// which two servers (two test packages at once) would share.
		"-s3.port.iceberg="+strconv.Itoa(ports[4]), "-s3.port.lance="+strconv.Itoa(ports[5]))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("seaweed: start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		logf.Close()
	})
	s := &Server{Endpoint: "http://127.0.0.1:" + strconv.Itoa(ports[3]), Dir: dir}
	if err := s.ready(bucket, 90*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
		if len(log) > 4000 {
			log = log[len(log)-4000:]
		}
		t.Fatalf("seaweed: %v\n%s", err, log)
	}
	return s
}

// ready waits until the bucket exists and takes an object.
func (s *Server) ready(bucket string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")})
	if err != nil {
		return err
	}
	var last error
	for ctx.Err() == nil {
		last = func() error {
			octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
			defer ocancel()
			ok, err := c.BucketExists(octx, bucket)
			if err != nil {
				return err
			}
			if !ok {
				if err := c.MakeBucket(octx, bucket, minio.MakeBucketOptions{}); err != nil {
					return err
				}
			}
			if _, err := c.PutObject(octx, bucket, ".ready", strings.NewReader("ok"), 2, minio.PutObjectOptions{}); err != nil {
				return err
			}
			return c.RemoveObject(octx, bucket, ".ready", minio.RemoveObjectOptions{})
		}()
		if last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the S3 gateway at %s did not take an object within %s: %v", s.Endpoint, timeout, last)
}
