package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/strata-es/strata/telemetry"
)

// configEntry is one variable of the configuration reference.
type configEntry struct {
	Name    string `json:"name"`
	Owner   string `json:"owner"` // "engine", "telemetry", or the declaring module's name
	Default string `json:"default,omitempty"`
	Doc     string `json:"doc"`
	Set     bool   `json:"set"` // the variable is set in this environment
}

// configReference lists every variable strata reads: the engine's
// (envVars), OpenTelemetry's and each module's declared settings.
func configReference(e env) ([]configEntry, error) {
	var out []configEntry
	for name, doc := range envVars {
		out = append(out, configEntry{Name: name, Owner: "engine", Doc: doc})
	}
	for _, name := range telemetry.EnvVars {
		out = append(out, configEntry{Name: name, Owner: "telemetry", Doc: "OpenTelemetry SDK setting (docs/operations.md)"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, m := range e.mods {
		for _, s := range m.Settings {
			out = append(out, configEntry{Name: s.Name, Owner: m.Name, Default: s.Default, Doc: s.Doc})
		}
	}
	if _, err := e.mods.Settings(); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Set = strings.TrimSpace(e.get(out[i].Name)) != ""
	}
	return out, nil
}

// cmdConfig prints the configuration reference: every variable, who reads
// it (the engine or a module), its default and what it does, and whether
// this environment sets it.
func cmdConfig(args []string, e env, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: strata config [--json]")
		return exitUsage
	}
	ref, err := configReference(e)
	if err != nil {
		fmt.Fprintln(stderr, "strata config:", err)
		return exitFailure
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(ref); err != nil {
			return exitFailure
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tOWNER\tSET\tDESCRIPTION")
	for _, c := range ref {
		set := ""
		if c.Set {
			set = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, c.Owner, set, c.Doc)
	}
	if err := tw.Flush(); err != nil {
		return exitFailure
	}
	return exitOK
}
