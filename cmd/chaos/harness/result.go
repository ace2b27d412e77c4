package harness

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Criterion is one pass criterion of a scenario and what the run measured.
type Criterion struct {
	Name string
	Want string
	Got  string
	Pass bool
}

// Result is the outcome of one scenario.
type Result struct {
	Scenario string
	Title    string
	Duration time.Duration
	Criteria []Criterion
	// Notes are measurements that are not criteria (counts, timings) and
	// the first examples of every failed criterion.
	Notes []string
	// Err is set when the scenario could not run to its checks (the
	// harness itself failed); such a scenario fails.
	Err error
}

// Passed reports whether the scenario ran and met every criterion.
func (r *Result) Passed() bool {
	if r.Err != nil || len(r.Criteria) == 0 {
		return false
	}
	for _, c := range r.Criteria {
		if !c.Pass {
			return false
		}
	}
	return true
}

// check records a criterion.
func (r *Result) check(name, want string, got any, pass bool) {
	r.Criteria = append(r.Criteria, Criterion{Name: name, Want: want, Got: fmt.Sprint(got), Pass: pass})
}

// zero records a criterion that a count must be zero.
func (r *Result) zero(name string, n int) {
	r.check(name, "0", n, n == 0)
}

// within records a criterion that a duration must not exceed limit; ok
// false means the event never happened at all.
func (r *Result) within(name string, limit, d time.Duration, ok bool) {
	got := "never"
	if ok {
		got = d.Round(10 * time.Millisecond).String()
	}
	r.check(name, "<= "+limit.String(), got, ok && d <= limit)
}

func (r *Result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// PrintTable writes the result table: one row per criterion, then a
// verdict per scenario.
func PrintTable(w io.Writer, results []*Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tCRITERION\tWANT\tGOT\tRESULT")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Scenario, "scenario ran to its checks", "yes", oneLine(r.Err.Error(), 70), "FAIL")
		}
		for _, c := range r.Criteria {
			verdict := "PASS"
			if !c.Pass {
				verdict = "FAIL"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Scenario, c.Name, c.Want, oneLine(c.Got, 70), verdict)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tTITLE\tTOOK\tVERDICT")
	for _, r := range results {
		verdict := "PASS"
		if !r.Passed() {
			verdict = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Scenario, r.Title, r.Duration.Round(100*time.Millisecond), verdict)
	}
	tw.Flush()
}

// PrintNotes writes every scenario's notes.
func PrintNotes(w io.Writer, results []*Result) {
	for _, r := range results {
		if len(r.Notes) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s notes:\n", r.Scenario)
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		s = s[:max-3] + "..."
	}
	return s
}
