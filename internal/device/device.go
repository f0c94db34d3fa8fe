// Package device turns the tools' --device flag into a compute backend.
package device

import (
	"fmt"
	"strings"

	"github.com/kakeya-ai/kakeya/compute"
)

// Names lists the devices --device accepts.
func Names() []string { return []string{"cpu"} }

// Backend returns the backend of a --device value, for model.Options:
// "cpu" gives nil, the model's own CPU backend of --threads threads.
func Backend(name string) (compute.Backend, error) {
	switch name {
	case "cpu":
		return nil, nil
	}
	return nil, fmt.Errorf("--device %q: want one of %s (no GPU backend is built yet)", name, strings.Join(Names(), ", "))
}
