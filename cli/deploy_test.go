package cli

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/telemetry"
)

// The files in deploy/ are checked against the binary: every strata
// command they run parses with the real flags, every variable they set is
// one strata reads, ports agree with --addr, and probes hit real routes.

func knownVar(name string) bool {
	if _, ok := envVars[name]; ok {
		return true
	}
	for _, v := range telemetry.EnvVars {
		if v == name {
			return true
		}
	}
	for _, m := range examples.All() {
		for _, s := range m.Settings {
			if s.Name == name {
				return true
			}
		}
	}
	return false
}

// checkArgs parses a strata command line as run would and returns the port
// of --addr for serve.
func checkArgs(t *testing.T, where string, args []string) (port string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no strata command", where)
		return ""
	}
	switch args[0] {
	case "serve":
		fs, addr, roles := serveFlags(exampleEnv(func(string) string { return "" }), io.Discard)
		if err := fs.Parse(args[1:]); err != nil {
			t.Errorf("%s: serve %v: %v", where, args[1:], err)
			return ""
		}
		if fs.NArg() > 0 {
			t.Errorf("%s: serve takes no arguments, got %v", where, fs.Args())
		}
		if _, err := parseRoles(*roles); err != nil {
			t.Errorf("%s: %v", where, err)
		}
		_, port, _ = strings.Cut(*addr, ":")
		return port
	case "migrate":
		if len(args) < 2 || (args[1] != "up" && args[1] != "status") {
			t.Errorf("%s: migrate %v: want up or status", where, args[1:])
		}
	default:
		t.Errorf("%s: unknown strata command %q", where, args[0])
	}
	return ""
}

func TestDeployCompose(t *testing.T) {
	raw, err := os.ReadFile("../deploy/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	roles := map[string]bool{}
	migrates := false
	for name, svc := range doc.Services {
		if !strings.HasPrefix(svc.Image, "strata:") {
			continue
		}
		for k := range svc.Environment {
			if !knownVar(k) {
				t.Errorf("service %s sets %s, which strata does not read", name, k)
			}
		}
		port := checkArgs(t, "service "+name, svc.Command)
		if svc.Command[0] == "migrate" {
			migrates = true
			continue
		}
		fs, _, rolesFlag := serveFlags(exampleEnv(func(string) string { return "" }), io.Discard)
		_ = fs.Parse(svc.Command[1:])
		rs, _ := parseRoles(*rolesFlag)
		for r := range rs {
			roles[r] = true
		}
		if len(svc.Ports) > 0 {
			for _, p := range svc.Ports {
				if !strings.HasSuffix(p, ":"+port) {
					t.Errorf("service %s publishes %s but listens on %s", name, p, port)
				}
			}
		}
	}
	for _, r := range allRoles {
		if !roles[r] {
			t.Errorf("no compose service runs the %s role", r)
		}
	}
	if !migrates {
		t.Error("no compose service applies migrations")
	}
	for _, dep := range []string{"postgres", "kurrentdb", "nats"} {
		if _, ok := doc.Services[dep]; !ok {
			t.Errorf("compose has no %s service", dep)
		}
	}
}

func TestDeployKubernetes(t *testing.T) {
	files, err := filepath.Glob("../deploy/k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	routes := map[string]bool{"/livez": true, "/readyz": true}
	kinds := map[string]int{}
	roles := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			kind, _ := obj["kind"].(string)
			kinds[kind]++
			name := filepath.Base(f) + "/" + kind
			switch kind {
			case "ConfigMap", "Secret":
				for _, key := range []string{"data", "stringData"} {
					m, _ := obj[key].(map[string]any)
					for k := range m {
						if !knownVar(k) {
							t.Errorf("%s sets %s, which strata does not read", name, k)
						}
					}
				}
			case "Deployment", "Job":
				var spec struct {
					Spec struct {
						Template struct {
							Spec struct {
								Containers []struct {
									Args  []string `json:"args"`
									Ports []struct {
										ContainerPort int `json:"containerPort"`
									} `json:"ports"`
									LivenessProbe  *probe         `json:"livenessProbe"`
									ReadinessProbe *probe         `json:"readinessProbe"`
									Resources      map[string]any `json:"resources"`
								} `json:"containers"`
							} `json:"spec"`
						} `json:"template"`
					} `json:"spec"`
				}
				b, _ := json.Marshal(obj)
				if err := json.Unmarshal(b, &spec); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, c := range spec.Spec.Template.Spec.Containers {
					port := checkArgs(t, name, c.Args)
					if c.Resources["requests"] == nil {
						t.Errorf("%s: no resource requests", name)
					}
					if kind == "Job" {
						continue
					}
					if len(c.Ports) != 1 || port == "" || c.Ports[0].ContainerPort == 0 || strings.TrimLeft(port, "0") != itoa(c.Ports[0].ContainerPort) {
						t.Errorf("%s: containerPort %v but --addr port %q", name, c.Ports, port)
					}
					for _, p := range []*probe{c.LivenessProbe, c.ReadinessProbe} {
						if p == nil || !routes[p.HTTPGet.Path] {
							t.Errorf("%s: probe %+v does not hit /livez or /readyz", name, p)
						}
					}
					if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/livez" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
						t.Errorf("%s: liveness must be /livez and readiness /readyz", name)
					}
					fs, _, rolesFlag := serveFlags(exampleEnv(func(string) string { return "" }), io.Discard)
					_ = fs.Parse(c.Args[1:])
					rs, _ := parseRoles(*rolesFlag)
					for r := range rs {
						roles[r] = true
					}
				}
			}
		}
	}
	if kinds["Job"] == 0 || kinds["Deployment"] < 3 {
		t.Errorf("want a migration Job and a Deployment per role, got %v", kinds)
	}
	for _, r := range allRoles {
		if !roles[r] {
			t.Errorf("no Deployment runs the %s role", r)
		}
	}
}

type probe struct {
	HTTPGet struct {
		Path string `json:"path"`
	} `json:"httpGet"`
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestDeployDockerfile(t *testing.T) {
	raw, err := os.ReadFile("../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var entry, cmd []string
	var user, expose string
	stages := 0
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		rest := strings.TrimSpace(strings.TrimPrefix(line, f[0]))
		switch strings.ToUpper(f[0]) {
		case "FROM":
			stages++
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &entry); err != nil {
				t.Fatalf("ENTRYPOINT is not exec form: %v", err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &cmd); err != nil {
				t.Fatalf("CMD is not exec form: %v", err)
			}
		case "USER":
			user = rest
		case "EXPOSE":
			expose = rest
		}
	}
	if stages < 2 {
		t.Error("Dockerfile is not multi-stage")
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("image runs as %q, want a non-root user", user)
	}
	if len(entry) != 1 || !strings.HasSuffix(entry[0], "/strata") {
		t.Errorf("ENTRYPOINT %v, want the strata binary", entry)
	}
	if port := checkArgs(t, "Dockerfile CMD", cmd); port != expose {
		t.Errorf("EXPOSE %s but CMD listens on %s", expose, port)
	}
	if !strings.Contains(string(raw), "CGO_ENABLED=0") {
		t.Error("the binary is not built static (CGO_ENABLED=0)")
	}
}

// The README's configuration table names every variable strata reads.
func TestReadmeDocumentsEveryVariable(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range envVars {
		if !strings.Contains(string(raw), "`"+name+"`") {
			t.Errorf("README.md does not document %s", name)
		}
	}
	settings, err := examples.All().Settings()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if !strings.Contains(string(raw), "`"+s.Name+"`") {
			t.Errorf("README.md does not document %s (a setting of an example module)", s.Name)
		}
	}
}
