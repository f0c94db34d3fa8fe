package compute

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// OpenOptions are what a backend is opened with by name (Open): the
// settings the tools' --device, --threads and --matmul flags carry. A
// backend ignores what does not apply to it.
type OpenOptions struct {
	// Device is the ordinal of the device ("cuda:1" opens 1), for a
	// backend with several.
	Device int
	// Threads is the number of host threads of a CPU backend; 0 means
	// GOMAXPROCS.
	Threads int
	// MatMul is the precision of the activations bf16 weights multiply:
	// "" (the backend's default), "bf16" or "f32".
	MatMul string
}

// An Opener opens a backend of one kind. It fails, saying why, where the
// backend cannot run (no driver, no device).
type Opener func(OpenOptions) (Backend, error)

// The backend registry, written by RegisterBackend from the backends'
// init functions, read by OpenBackend.
var (
	backendsMu sync.RWMutex
	backends   = map[string]Opener{}
)

// RegisterBackend makes a backend openable by name, as database/sql.Register
// makes a driver: a backend package registers itself from an init
// function, and a program that imports the package (for its side effect
// only, where it names nothing in it) can open it. It panics when name
// is empty, holds a colon or upper case, is taken, or open is nil.
func RegisterBackend(name string, open Opener) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if name == "" || strings.ContainsAny(name, ":") || name != strings.ToLower(name) || open == nil {
		panic(fmt.Sprintf("compute: RegisterBackend(%q): want a lower-case name without a colon and an opener", name))
	}
	if _, dup := backends[name]; dup {
		panic(fmt.Sprintf("compute: RegisterBackend(%q): registered twice", name))
	}
	backends[name] = open
}

// Backends returns the names of the registered backends, sorted.
func Backends() []string {
	backendsMu.RLock()
	defer backendsMu.RUnlock()
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// OpenBackend opens the backend named name, "NAME" or "NAME:N" for device
// N (which sets o.Device), with o. An unknown name's error lists the
// registered ones.
func OpenBackend(name string, o OpenOptions) (Backend, error) {
	kind, ord, hasOrd := strings.Cut(name, ":")
	backendsMu.RLock()
	open, ok := backends[kind]
	backendsMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("compute: unknown backend %q (registered: %s)", name, strings.Join(Backends(), ", "))
	}
	if hasOrd {
		n, err := strconv.Atoi(ord)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("compute: backend %q: want %s or %s:N with N a device ordinal (0, 1, ...)", name, kind, kind)
		}
		o.Device = n
	}
	return open(o)
}
