package device

import (
	"strings"
	"testing"
)

func TestBackend(t *testing.T) {
	if b, err := Backend("cpu"); b != nil || err != nil {
		t.Errorf("cpu: %v, %v; want the model's default (nil)", b, err)
	}
	for _, name := range []string{"cuda", "", "CPU"} {
		if _, err := Backend(name); err == nil || !strings.Contains(err.Error(), "want one of cpu") {
			t.Errorf("%q: err = %v", name, err)
		}
	}
}
