package module_test

import (
	"embed"
	"fmt"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/module"
)

// A module in one file: greetings. A real module splits this into its
// domain, write side (…cmd), projections (…view) and query side (…query)
// packages, as examples/loyalty does.

// Greeted is the module's one event. Its type name is stable: it is
// stored with every event, so it never follows a Go rename.
type Greeted struct {
	Who        string    `json:"who"`
	Salutation string    `json:"salutation"`
	At         time.Time `json:"at"`
}

func (Greeted) EventType() string { return "greeting.greeted" }

// codecs describe the module's events to the process's one registry.
func codecs() []event.Codec {
	return []event.Codec{{Type: "greeting.greeted", Version: 1, New: func() event.Payload { return new(Greeted) }}}
}

// Greeting is the aggregate: how often a name was greeted.
type Greeting struct{ Version int64 }

var greetings = commands.Aggregate[*Greeting]{
	Kind:   "greeting",
	Stream: func(who string) string { return "greeting-" + who },
	Load: func(history []event.Payload) (*Greeting, error) {
		return &Greeting{Version: int64(len(history))}, nil
	},
	Version:  func(g *Greeting) int64 { return g.Version },
	NotFound: fmt.Errorf("%w: nobody greeted by that name", domain.ErrNotFound),
}

// Greet is the one command.
type Greet struct {
	Who        string `json:"who"`
	Salutation string `json:"salutation"`
}

func (Greet) Name() string     { return "greeting.greet" }
func (c Greet) Target() string { return c.Who }
func (c Greet) Decide(_ *Greeting, now time.Time) ([]event.Payload, error) {
	return []event.Payload{Greeted{Who: c.Who, Salutation: c.Salutation, At: now}}, nil
}

// The module's migration line: its numbered SQL files, embedded in the
// binary, and the class of every table they create (db.TenantTables: the
// erasure inventory and the catalog checks read it).
//
//go:embed testdata/greetings/*.sql
var migrationFiles embed.FS

var migrations = db.EmbeddedLine("greetings", migrationFiles, "testdata/greetings", db.TenantTables("greetings"))

// SettingSalutation is the module's one setting, declared in its Module:
// strata config lists it, and Commands gets its value.
const SettingSalutation = "GREETING_SALUTATION"

// greetingModule is what the module's root package exports as Module(), and
// what the application's main hands to strata.Main.
func greetingModule() module.Module {
	return module.Module{
		Name:       "greetings",
		Codecs:     codecs,
		Migrations: &migrations,
		Settings: []module.Setting{{Name: SettingSalutation, Default: "Hello",
			Doc: "the word a greeting starts with"}},
		Commands: func(r *mux.Router, d module.Deps) error {
			salutation := d.Settings.Get(SettingSalutation)
			return commandapi.Mount(r, d.Deps, greetings, commandapi.Resource{IDField: "who"},
				commandapi.Route[*Greeting]{Name: "greeting.greet", Method: http.MethodPost, Path: "/v1/greetings/{who}",
					Command: func(w http.ResponseWriter, r *http.Request) (commands.Command[*Greeting], error) {
						who, err := httpapi.PathID(r, "who", "who")
						if err != nil {
							return nil, err
						}
						if err := commandapi.EmptyBody(w, r); err != nil {
							return nil, err
						}
						return Greet{Who: who, Salutation: salutation}, nil
					}})
		},
	}
}

// The entry point checks the module set and mounts every module's routes,
// each with its own settings; here by hand, to show what it sees.
func ExampleModule() {
	set := module.Set{greetingModule()}
	if err := set.Check(); err != nil {
		fmt.Println(err)
		return
	}
	r := mux.NewRouter()
	deps := commandapi.Deps{Config: commands.Config{Registry: set.MustRegistry()}}
	if err := set.MountCommands(r, deps, func(string) string { return "" }); err != nil {
		fmt.Println(err)
		return
	}
	_ = r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, _ := route.GetPathTemplate()
		methods, _ := route.GetMethods()
		fmt.Println("route:", route.GetName(), methods, path)
		return nil
	})
	for _, l := range set.Lines() {
		for _, m := range l.Migrations() {
			fmt.Println("migration:", m.ID())
		}
	}
	settings, _ := set.Settings()
	for _, s := range settings {
		fmt.Printf("setting: %s (default %q): %s\n", s.Name, s.Default, s.Doc)
	}
	// Output:
	// route: greeting.greet [POST] /v1/greetings/{who}
	// migration: greetings/001_greetings
	// setting: GREETING_SALUTATION (default "Hello"): the word a greeting starts with
}
