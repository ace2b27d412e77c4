package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// EnvVar lists the armed failpoints: comma-separated names, each optionally
// followed by "=N" to fire on the Nth hit instead of the first, e.g.
// STRATA_FAILPOINTS=projector.before-commit=3.
const EnvVar = "STRATA_FAILPOINTS"

type point struct {
	after int64 // fire on this hit (1-based)
	hits  atomic.Int64
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
	points, err := Parse(spec)
	if err != nil {
		// A typo must not silently disarm a crash test.
		fmt.Fprintf(os.Stderr, "failpoint: %v\n", err)
		os.Exit(2)
	}
	armed = make(map[string]*point, len(points))
	for name, n := range points {
		armed[name] = &point{after: n}
	}
	active.Store(true)
}

// Parse reads a STRATA_FAILPOINTS value into name -> hit number.
func Parse(spec string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, count, hasCount := strings.Cut(item, "=")
		n := int64(1)
		if hasCount {
			var err error
			n, err = strconv.ParseInt(count, 10, 64)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%s: %q: the hit number must be a positive integer", EnvVar, item)
			}
		}
		if name == "" {
			return nil, fmt.Errorf("%s: %q: empty failpoint name", EnvVar, item)
		}
		out[name] = n
	}
	return out, nil
}

// Hit kills the process with SIGKILL (no deferred functions, no flushing,
// no goodbye to the database) when name is armed and this is its armed hit.
// Otherwise it returns at the cost of one atomic load.
func Hit(name string) {
	once.Do(load)
	if !active.Load() {
		return
	}
	p := armed[name]
	if p == nil || p.hits.Add(1) != p.after {
		return
	}
	kill()
}

func kill() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // SIGKILL on Unix
	}
	select {} // the signal is asynchronous: never run past the failpoint
}
