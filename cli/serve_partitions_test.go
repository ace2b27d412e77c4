package cli

import (
	"strings"
	"testing"

	"github.com/strata-es/strata/examples"
)

// TestProjectionPartitionsSetting: STRATA_PROJECTION_PARTITIONS names
// Partitionable projections with a power of two from 2 to 16; anything
// else is refused with an error that says what is wrong.
func TestProjectionPartitionsSetting(t *testing.T) {
	ps := examples.All().Projections()
	read := func(v string) (map[string]int, error) {
		return projectionPartitions(newEnv(func(name string) string {
			if name == "STRATA_PROJECTION_PARTITIONS" {
				return v
			}
			return ""
		}, examples.All()), ps)
	}
	got, err := read(" order_details=2, order_list=16 ")
	if err != nil || len(got) != 2 || got["order_details"] != 2 || got["order_list"] != 16 {
		t.Fatalf("order_details=2,order_list=16: %v, %v", got, err)
	}
	if got, err := read(""); err != nil || len(got) != 0 {
		t.Fatalf("unset: %v, %v", got, err)
	}
	for v, want := range map[string]string{
		"order_details":                   "want projection=count",
		"order_details=two":               "want projection=count",
		"order_details=3":                 "power of two",
		"order_details=1":                 "power of two",
		"order_details=32":                "power of two",
		"nope=2":                          `no projection "nope"`,
		"order_details=2,order_details=4": "listed twice",
		"customer_summary=2":              "does not declare itself Partitionable",
	} {
		_, err := read(v)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", v, err, want)
		}
	}
}
