package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable prints the results as an aligned table.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tCONC\tSTRATA (median [min-max])\tP50/P95/P99 ms\tRAW BASELINE\tRAW P99 ms\tRATIO\tTARGET")
	for _, res := range r.Results {
		raw, rawP99, ratio := "-", "-", "-"
		if res.Raw != nil {
			raw = fmt.Sprintf("%s %s", num(res.Raw.Median.Throughput), res.Unit)
			rawP99 = fmt.Sprintf("%.2f", res.Raw.Median.P99ms)
			ratio = fmt.Sprintf("%.2fx", res.Ratio)
		}
		target := res.Target
		if res.Met != nil {
			if *res.Met {
				target += " ok"
			} else {
				target += " MISSED"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s [%s-%s] %s\t%.2f/%.2f/%.2f\t%s\t%s\t%s\t%s\n",
			res.Workload, res.Concurrency,
			num(res.Strata.Median.Throughput), num(res.Strata.MinThroughput), num(res.Strata.MaxThroughput), res.Unit,
			res.Strata.Median.P50ms, res.Strata.Median.P95ms, res.Strata.Median.P99ms,
			raw, rawP99, ratio, target)
	}
	tw.Flush()
	for _, res := range r.Results {
		var errs int64
		for _, run := range res.Strata.Runs {
			errs += run.Errors
		}
		if res.Raw != nil {
			for _, run := range res.Raw.Runs {
				errs += run.Errors
			}
		}
		if errs > 0 {
			fmt.Fprintf(w, "WARNING (%s/%d): %d operations failed and are not counted; the numbers above are not valid\n", res.Workload, res.Concurrency, errs)
		}
	}
	for _, res := range r.Results {
		if res.Note != "" {
			fmt.Fprintf(w, "note (%s/%d): %s\n", res.Workload, res.Concurrency, res.Note)
		}
	}
	var keys []string
	for k, v := range r.PostgreSQL {
		keys = append(keys, k+"="+v)
	}
	fmt.Fprintf(w, "PostgreSQL settings: %s\n", strings.Join(sortStrings(keys), " "))
}

func num(f float64) string {
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f < 10:
		return fmt.Sprintf("%.3g", f) // seconds of a command: 0.116, not 0.1
	}
	return fmt.Sprintf("%.1f", f)
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}
