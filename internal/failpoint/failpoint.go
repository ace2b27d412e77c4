package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// EnvVar lists the armed failpoints, comma-separated. Each item is one of
//
//	name          kill the process at the point's first Hit
//	name=N        kill it at the Nth Hit, e.g. projector.before-commit=3
//	name=300ms    sleep that long at every Delay of the point (a slow broker, say)
//	name=panic:K  panic at every PanicFor of the point whose key is K (a module's
//	              handler that panics on one tenant's events, say)
const EnvVar = "STRATA_FAILPOINTS"

// Spec is one armed point.
type Spec struct {
	// After: kill at this Hit (1-based); 0 when the point is not a kill.
	After int64
	// Delay: how long each Delay sleeps; 0 when the point is not a delay.
	Delay time.Duration
	// PanicKey: the key PanicFor panics on; "" when the point is not a panic.
	PanicKey string
}

type point struct {
	Spec
	hits atomic.Int64
}

var (
	once   sync.Once
	armed  map[string]*point
	active atomic.Bool
)

func load() {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return
	}
	points, err := ParseSpecs(spec)
	if err != nil {
		// A typo must not silently disarm a crash test.
		fmt.Fprintf(os.Stderr, "failpoint: %v\n", err)
		os.Exit(2)
	}
	armed = make(map[string]*point, len(points))
	for name, s := range points {
		armed[name] = &point{Spec: s}
	}
	active.Store(true)
}

// Parse reads a STRATA_FAILPOINTS value of kill points into name -> hit
// number (ParseSpecs reads every kind).
func Parse(spec string) (map[string]int64, error) {
	specs, err := ParseSpecs(spec)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for name, s := range specs {
		if s.After == 0 {
			return nil, fmt.Errorf("%s: %q is not a kill point", EnvVar, name)
		}
		out[name] = s.After
	}
	return out, nil
}

// ParseSpecs reads a STRATA_FAILPOINTS value.
func ParseSpecs(spec string) (map[string]Spec, error) {
	out := map[string]Spec{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, value, hasValue := strings.Cut(item, "=")
		if name == "" {
			return nil, fmt.Errorf("%s: %q: empty failpoint name", EnvVar, item)
		}
		s := Spec{After: 1}
		switch {
		case !hasValue:
		case strings.HasPrefix(value, "panic:"):
			s = Spec{PanicKey: strings.TrimPrefix(value, "panic:")}
			if s.PanicKey == "" {
				return nil, fmt.Errorf("%s: %q: a panic point needs a key", EnvVar, item)
			}
		default:
			n, err := strconv.ParseInt(value, 10, 64)
			if err == nil {
				if n < 1 {
					return nil, fmt.Errorf("%s: %q: the hit number must be a positive integer", EnvVar, item)
				}
				s = Spec{After: n}
				break
			}
			d, derr := time.ParseDuration(value)
			if derr != nil || d <= 0 {
				return nil, fmt.Errorf("%s: %q: want a positive hit number, a positive duration or panic:<key>", EnvVar, item)
			}
			s = Spec{Delay: d}
		}
		out[name] = s
	}
	return out, nil
}

func lookup(name string) *point {
	once.Do(load)
	if !active.Load() {
		return nil
	}
	return armed[name]
}

// Hit kills the process with SIGKILL (no deferred functions, no flushing,
// no goodbye to the database) when name is armed as a kill point and this
// is its armed hit. Otherwise it returns at the cost of one atomic load.
func Hit(name string) {
	p := lookup(name)
	if p == nil || p.After == 0 || p.hits.Add(1) != p.After {
		return
	}
	kill()
}

// Delay sleeps for the point's duration when name is armed as a delay
// point; otherwise it returns at the cost of one atomic load.
func Delay(name string) {
	if p := lookup(name); p != nil && p.Delay > 0 {
		time.Sleep(p.Delay)
	}
}

// PanicFor panics when name is armed as a panic point for key; otherwise
// it returns at the cost of one atomic load. It stands for a module's code
// that panics on some input: the engine must survive it (ARCHITECTURE
// decision 17).
func PanicFor(name, key string) {
	if p := lookup(name); p != nil && p.PanicKey != "" && p.PanicKey == key {
		panic(fmt.Sprintf("failpoint %s: armed panic for %s", name, key))
	}
}

func kill() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // SIGKILL on Unix
	}
	select {} // the signal is asynchronous: never run past the failpoint
}
