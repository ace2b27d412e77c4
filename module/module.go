// Package module is the contract between the engine and an application's
// bounded contexts (ARCHITECTURE decisions 9 and 15): a Module is one value
// holding everything the engine needs of a context — its event codecs, its
// migration line, its command routes, projections, query routes, process
// managers and settings — and a Set is the modules of one application. A
// module's own package builds its Module (examples/orders.Module()); the
// application's main hands the Set to the entry point. This package imports
// the engine's public packages only; the engine's runtime imports it.
package module

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"
)

// Module is one bounded context: what the engine needs of it. Every part
// but Name and Codecs is optional.
type Module struct {
	// Name identifies the module in messages: lower-case [a-z][a-z0-9_]*.
	Name string
	// Codecs are the module's event types.
	Codecs func() []event.Codec
	// Migrations is the module's own migration line (its tables, each
	// declared with its class: db.TenantTables, db.Declare).
	Migrations *db.Line
	// Settings are the module's configuration variables: the entry point
	// reads them from the environment, lists them (`strata config`) and
	// hands their values to Commands and Processes (Deps.Settings). A
	// module reads no variable it did not declare.
	Settings []Setting
	// Commands mounts the module's command routes (commandapi.Mount per
	// aggregate type). Routes match in the order they are mounted: mount a
	// literal path (/v1/subscriptions/mrr) before a pattern that would
	// take it (/v1/subscriptions/{id}).
	Commands func(r *mux.Router, d Deps) error
	// Projections returns the module's projections writing into their
	// live tables.
	Projections func() []projections.Projection
	// Queries returns the module's query routes.
	Queries func(d *readmodels.DB) []queryapi.Route
	// Processes returns the module's process managers (ARCHITECTURE
	// decision 10), with the commands they issue bound to d's store and the
	// ports of their external effects.
	Processes func(d Deps) ([]process.Spec, error)
	// OpenAPI is the module's OpenAPI 3.1 fragment, YAML or JSON (usually
	// a go:embed file): the paths of its routes and their schemas. serve
	// merges it into the engine's document at start (package cli/openapi
	// says how, and what an operation marked x-strata-route gets from the
	// engine) and serves the whole at /openapi.json; a fragment that clashes
	// with the engine's or another module's, or is invalid, stops the start.
	OpenAPI []byte
}

// Deps is what a module's command routes and process managers are made
// with: the command side's dependencies (a process's commands run through
// the same handlers, under idempotency keys) and the module's settings.
type Deps struct {
	commandapi.Deps
	Settings Settings
}

// Setting declares one configuration variable of a module.
type Setting struct {
	// Name is the environment variable, upper-case [A-Z][A-Z0-9_]*, e.g.
	// STRATA_PAYMENT_TIMEOUT.
	Name string
	// Default is the value when the variable is unset ("": none; the
	// module decides what none means).
	Default string
	// Doc says what the setting does, its unit and its default, for the
	// configuration reference.
	Doc string
}

// Settings are the values of one module's settings, as the entry point
// read them.
type Settings struct {
	module string
	values map[string]string
}

// NewSettings returns the values of m's settings read with getenv (an
// unset or blank variable takes its Default). The entry point calls it; a
// test of a module calls it with its own getenv.
func NewSettings(m Module, getenv func(string) string) Settings {
	s := Settings{module: m.Name, values: map[string]string{}}
	for _, d := range m.Settings {
		v := strings.TrimSpace(getenv(d.Name))
		if v == "" {
			v = d.Default
		}
		s.values[d.Name] = v
	}
	return s
}

// Get returns the value of the module's setting name. It panics on a name
// the module did not declare: a setting missing from Module.Settings is a
// programming error that the configuration reference would not show.
func (s Settings) Get(name string) string {
	v, ok := s.values[name]
	if !ok {
		panic(fmt.Sprintf("module %s reads setting %s, which it does not declare in Module.Settings", s.module, name))
	}
	return v
}

// Set is the modules of one application, in a stable order.
type Set []Module

// Registry returns the one registry holding every module's codecs: every
// path that decodes events (handlers, runners, rebuilds, retries, relay
// consumers, replay) gets this one. It fails on an event type two modules
// both claim.
func (s Set) Registry() (*event.Registry, error) {
	var codecs []event.Codec
	owner := map[string]string{}
	for _, m := range s {
		for _, c := range m.Codecs() {
			if o, dup := owner[c.Type]; dup {
				return nil, fmt.Errorf("modules %s and %s both register event type %q", o, m.Name, c.Type)
			}
			owner[c.Type] = m.Name
			codecs = append(codecs, c)
		}
	}
	return event.NewRegistry(codecs...), nil
}

// MustRegistry is Registry for tests and tools, where a clash is a bug.
func (s Set) MustRegistry() *event.Registry {
	r, err := s.Registry()
	if err != nil {
		panic(err)
	}
	return r
}

// Projections returns every module's projections, in module order; it
// fails on a projection name two modules both use (the name is the
// checkpoint key).
func (s Set) Projections() []projections.Projection {
	var out []projections.Projection
	for _, m := range s {
		if m.Projections != nil {
			out = append(out, m.Projections()...)
		}
	}
	return out
}

// Tables returns every table the modules' projections write (their live
// tables), sorted: what a tool resets or compares to cover every read model.
func (s Set) Tables() []string {
	var out []string
	for _, p := range s.Projections() {
		out = append(out, p.Tables()...)
	}
	sort.Strings(out)
	return out
}

// CheckProjections reports projection names used twice.
func (s Set) CheckProjections() error {
	seen := map[string]bool{}
	var errs []error
	for _, p := range s.Projections() {
		if seen[p.Name()] {
			errs = append(errs, fmt.Errorf("projection name %q is used twice", p.Name()))
		}
		seen[p.Name()] = true
	}
	return errors.Join(errs...)
}

// Lines returns the modules' migration lines, in module order (the
// engine's own line is always applied first).
func (s Set) Lines() []db.Line {
	var out []db.Line
	for _, m := range s {
		if m.Migrations != nil {
			out = append(out, *m.Migrations)
		}
	}
	return out
}

// MountCommands mounts every module's command routes on r, each module
// with its own settings read with getenv.
func (s Set) MountCommands(r *mux.Router, d commandapi.Deps, getenv func(string) string) error {
	for _, m := range s {
		if m.Commands != nil {
			if err := m.Commands(r, Deps{Deps: d, Settings: NewSettings(m, getenv)}); err != nil {
				return fmt.Errorf("module %s: %w", m.Name, err)
			}
		}
	}
	return nil
}

// Queries returns every module's query routes.
func (s Set) Queries(d *readmodels.DB) []queryapi.Route {
	var out []queryapi.Route
	for _, m := range s {
		if m.Queries != nil {
			out = append(out, m.Queries(d)...)
		}
	}
	return out
}

// Processes returns every module's process managers; it fails on a
// module's bad settings and on a process name used twice or also used by
// a projection (the name is a checkpoint key).
func (s Set) Processes(d commandapi.Deps, getenv func(string) string) ([]process.Spec, error) {
	seen := map[string]string{}
	for _, p := range s.Projections() {
		seen[p.Name()] = "a projection"
	}
	var out []process.Spec
	for _, m := range s {
		if m.Processes == nil {
			continue
		}
		specs, err := m.Processes(Deps{Deps: d, Settings: NewSettings(m, getenv)})
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", m.Name, err)
		}
		for _, sp := range specs {
			name := sp.Manager.Name()
			if by, dup := seen[name]; dup {
				return nil, fmt.Errorf("module %s: process name %q is used by %s too", m.Name, name, by)
			}
			seen[name] = "module " + m.Name
			out = append(out, sp)
		}
	}
	return out, nil
}

// Settings returns every module's declared settings, in module order; it
// fails on a malformed name and on a name two modules (or a module twice)
// declare.
func (s Set) Settings() ([]Setting, error) {
	var out []Setting
	owner := map[string]string{}
	var errs []error
	for _, m := range s {
		for _, d := range m.Settings {
			if !settingName.MatchString(d.Name) || d.Doc == "" {
				errs = append(errs, fmt.Errorf("module %s: setting %q: want an upper-case name ([A-Z][A-Z0-9_]*) and a doc", m.Name, d.Name))
				continue
			}
			if o, dup := owner[d.Name]; dup {
				errs = append(errs, fmt.Errorf("modules %s and %s both declare setting %s", o, m.Name, d.Name))
				continue
			}
			owner[d.Name] = m.Name
			out = append(out, d)
		}
	}
	return out, errors.Join(errs...)
}

var settingName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// Check reports what makes the set unusable, every problem at once: no
// module, a module without a name or codecs, a name used twice, an event
// type or a projection or process name two modules claim, a malformed or
// clashing setting.
func (s Set) Check() error {
	var errs []error
	if len(s) == 0 {
		errs = append(errs, errors.New("no module: an application runs at least one"))
	}
	names := map[string]bool{}
	for i, m := range s {
		switch {
		case !moduleName.MatchString(m.Name):
			errs = append(errs, fmt.Errorf("module %d: name %q: want lower-case [a-z][a-z0-9_]*", i, m.Name))
		case names[m.Name]:
			errs = append(errs, fmt.Errorf("module name %q is used twice", m.Name))
		}
		names[m.Name] = true
		if m.Codecs == nil {
			errs = append(errs, fmt.Errorf("module %s: no Codecs", m.Name))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if _, err := s.Registry(); err != nil {
		errs = append(errs, err)
	}
	if err := s.CheckProjections(); err != nil {
		errs = append(errs, err)
	}
	if _, err := s.Settings(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var moduleName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
