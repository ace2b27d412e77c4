package failpoint

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestParseSpecs(t *testing.T) {
	t.Parallel()
	got, err := ParseSpecs("a, b=3, slow=300ms, boom=panic:t-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Spec{"a": {After: 1}, "b": {After: 3}, "slow": {Delay: 300 * time.Millisecond}, "boom": {PanicKey: "t-1"}}
	if len(got) != len(want) {
		t.Fatalf("ParseSpecs = %v", got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
	for _, bad := range []string{"a=0", "a=x", "=2", "b=-1", "c=-5ms", "d=panic:", "e=0s"} {
		if _, err := ParseSpecs(bad); err == nil {
			t.Errorf("ParseSpecs(%q) accepted", bad)
		}
	}
	if _, err := Parse("slow=1s"); err == nil {
		t.Error("Parse, which reads kill points, accepted a delay point")
	}
}

// TestDelayAndPanicFor runs this test binary again with a delay point and
// a panic point armed: Delay sleeps, PanicFor panics for its key only, and
// Hit does nothing at either.
func TestDelayAndPanicFor(t *testing.T) {
	if os.Getenv("FAILPOINT_TEST_CHILD") == "2" {
		start := time.Now()
		Delay("slow")
		Hit("slow")
		Delay("other")
		fmt.Printf("slept %v\n", time.Since(start) >= 200*time.Millisecond)
		PanicFor("boom", "t-2")
		Hit("boom")
		defer func() { fmt.Printf("recovered %v\n", recover()); os.Exit(0) }()
		PanicFor("boom", "t-1")
		os.Exit(3)
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDelayAndPanicFor$")
	cmd.Env = append(os.Environ(), "FAILPOINT_TEST_CHILD=2", EnvVar+"=slow=200ms,boom=panic:t-1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if want := "slept true\nrecovered failpoint boom: armed panic for t-1\n"; string(out) != want {
		t.Errorf("child printed %q, want %q", out, want)
	}
}

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
