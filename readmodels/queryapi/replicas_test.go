package queryapi

import (
	"testing"
	"time"
)

func TestParseLSN(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		bad  bool
	}{{"0/0", 0, false}, {"16/B374D848", 0x16B374D848, false}, {"FFFFFFFF/FFFFFFFF", 1<<64 - 1, false},
		{"", 0, true}, {"16B374D848", 0, true}, {"x/1", 0, true}, {"1/100000000", 0, true}} {
		got, err := ParseLSN(c.in)
		if (err != nil) != c.bad || !c.bad && got != c.want {
			t.Errorf("ParseLSN(%q) = %x, %v; want %x, bad %v", c.in, got, err, c.want, c.bad)
		}
	}
}

// TestReplicaLagEstimate: the lag is how long ago the primary's WAL passed
// the replica's replay position, interpolated between samples; 0 when the
// replica has all of the newest sample; a lower bound (false) when the
// primary was past it in every sample kept.
func TestReplicaLagEstimate(t *testing.T) {
	s := NewReplicaSet(ReplicaConfig{MaxLag: 10 * time.Second})
	t0 := time.Unix(1000, 0)
	s.primary = []lsnAt{{lsn: 1000, at: t0}, {lsn: 2000, at: t0.Add(time.Second)}, {lsn: 4000, at: t0.Add(2 * time.Second)}}
	now := t0.Add(2 * time.Second)
	for _, c := range []struct {
		replayed uint64
		want     time.Duration
		within   bool
	}{{4000, 0, true}, {5000, 0, true}, {3000, 500 * time.Millisecond, true}, {2000, time.Second, true},
		{1500, 1500 * time.Millisecond, true}, {1000, 2 * time.Second, true}, {500, 2 * time.Second, false}} {
		got, within := s.lagSince(c.replayed, now)
		if got != c.want || within != c.within {
			t.Errorf("lagSince(%d) = %s, %v; want %s, %v", c.replayed, got, within, c.want, c.within)
		}
	}
}

// TestPickSkipsUnusable: Pick passes over replicas that are lagging,
// unreachable, not replicas or not yet sampled, and paused ones for a
// read with a token; it rotates among the usable.
func TestPickSkipsUnusable(t *testing.T) {
	s := NewReplicaSet(ReplicaConfig{}, NamedPool{Name: "a"}, NamedPool{Name: "b"}, NamedPool{Name: "c"}, NamedPool{Name: "d"})
	if r := s.Pick(false); r != nil {
		t.Fatalf("picked %s before any sample", r.Name())
	}
	set := func(i int, state string) {
		s.replicas[i].last.Store(&ReplicaSample{Name: s.replicas[i].name, State: state})
	}
	set(0, StateLagging)
	set(1, StateStreaming)
	set(2, StatePaused)
	set(3, StateUnreachable)
	seen := map[string]int{}
	for i := 0; i < 100; i++ {
		seen[s.Pick(false).Name()]++
		if r := s.Pick(true); r.Name() != "b" {
			t.Fatalf("a read with a token went to %s", r.Name())
		}
	}
	if seen["b"] == 0 || seen["c"] == 0 || len(seen) != 2 {
		t.Errorf("reads without a token went to %v, want b and c", seen)
	}
	set(1, StateNotReplica)
	if r := s.Pick(true); r != nil {
		t.Errorf("a read with a token went to %s with only a paused replica usable", r.Name())
	}
}
