package cli

import (
	"reflect"
	"testing"
)

// STRATA_QUERY_DATABASE_URL is a comma-separated list of URLs, and a URL
// may name several hosts with commas of its own (a Patroni cluster's
// standbys, docs/operations.md "Failover"): the list splits only where a
// URL begins, and the URL keeps its hosts and target_session_attrs.
func TestSplitReplicaURLs(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want []string
	}{
		{"postgres://u@r1:5432/db", []string{"postgres://u@r1:5432/db"}},
		{"postgres://u@r1:5432/db,postgres://u@r2:5432/db", []string{"postgres://u@r1:5432/db", "postgres://u@r2:5432/db"}},
		{"postgres://u@r1:5432,r2:5433/db?target_session_attrs=prefer-standby, postgresql://u@r3/db",
			[]string{"postgres://u@r1:5432,r2:5433/db?target_session_attrs=prefer-standby", " postgresql://u@r3/db"}},
		{"host=r1 user=u,host=r2 user=u", []string{"host=r1 user=u", "host=r2 user=u"}},
	} {
		if got := splitURLs(c.raw); !reflect.DeepEqual(got, c.want) {
			t.Errorf("splitURLs(%q) = %q, want %q", c.raw, got, c.want)
		}
	}
	name, err := replicaName("postgres://u:secret@r1:5432,r2:5433/db?sslmode=prefer&target_session_attrs=prefer-standby")
	if err != nil || name != "r1:5432|r2:5433" {
		t.Errorf("replicaName of a multi-host URL = %q, %v; want r1:5432|r2:5433", name, err)
	}
	if name, _ := replicaName("postgres://u@r1:5432/db?sslmode=prefer"); name != "r1:5432" {
		t.Errorf("replicaName of a one-host URL = %q, want r1:5432", name)
	}
}
