package failpoint

import (
	"os"
	"os/exec"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	got, err := Parse("a, b=3,,c=1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["a"] != 1 || got["b"] != 3 || got["c"] != 1 {
		t.Fatalf("Parse = %v", got)
	}
	for _, bad := range []string{"a=0", "a=x", "=2", "b=-1"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestHitKills runs this test binary again with the failpoint armed for its
// second hit and checks that the child dies of SIGKILL right there.
func TestHitKills(t *testing.T) {
	if os.Getenv("FAILPOINT_TEST_CHILD") == "1" {
		Hit("test.point")
		os.Stdout.WriteString("survived first hit\n")
		Hit("other.point")
		Hit("test.point")
		os.Stdout.WriteString("survived second hit\n")
		os.Exit(0)
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitKills$")
	cmd.Env = append(os.Environ(), "FAILPOINT_TEST_CHILD=1", EnvVar+"=test.point=2")
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.Success() || ee.ProcessState.String() != "signal: killed" {
		t.Fatalf("child: err=%v output=%q, want death by SIGKILL", err, out)
	}
	if string(out) != "survived first hit\n" {
		t.Fatalf("child output %q", out)
	}
}
