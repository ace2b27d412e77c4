package decision_test

import (
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/decision"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ok := decision.Decision[int]{Status: "reserving",
		Commands:  []decision.Command{{Step: "reserve:a", Name: "inventory.reserve"}},
		Intents:   []decision.Intent{{Step: "capture", Port: "payment"}},
		Deadlines: []decision.Deadline{{Name: "payment", At: at}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a valid decision: %v", err)
	}
	long := strings.Repeat("s", decision.MaxStepKey+1)
	for _, tt := range []struct {
		name   string
		change func(d *decision.Decision[int])
		want   string
	}{
		{"status not a label", func(d *decision.Decision[int]) { d.Status = "Reserving" }, `decided status "Reserving"`},
		{"no status", func(d *decision.Decision[int]) { d.Status = "" }, `decided status ""`},
		{"command without a name", func(d *decision.Decision[int]) { d.Commands[0].Name = "" }, "decided a command without a step key or name"},
		{"intent without a step", func(d *decision.Decision[int]) { d.Intents[0].Step = "" }, "decided an intent without a step key or name"},
		{"a step key used by a command and an intent", func(d *decision.Decision[int]) { d.Intents[0].Step = "reserve:a" }, `decided step "reserve:a" twice`},
		{"a step key too long", func(d *decision.Decision[int]) { d.Commands[0].Step = long }, "longer than 120"},
		{"a deadline without a time", func(d *decision.Decision[int]) { d.Deadlines[0].At = time.Time{} }, "deadline without a name or time"},
		{"a deadline name too long", func(d *decision.Decision[int]) { d.Deadlines[0].Name = long }, "deadline name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := ok
			d.Commands = append([]decision.Command(nil), ok.Commands...)
			d.Intents = append([]decision.Intent(nil), ok.Intents...)
			d.Deadlines = append([]decision.Deadline(nil), ok.Deadlines...)
			tt.change(&d)
			if err := d.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestStepKey(t *testing.T) {
	t.Parallel()
	if got := decision.StepKey("fulfilment", "o-1", "capture"); got != "pm:fulfilment:o-1:capture" {
		t.Errorf("StepKey = %q: a step's key is stored with its outcome and must never change form", got)
	}
}
