package kvconfig

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Settings are the values a Spec takes for one model and calibration, the
// defaults applied: what a report records and a stats line names.
type Settings struct {
	// K and V are the codec specs in effect ("" for uncompressed).
	K string `json:"k"`
	V string `json:"v"`
	// BlockSize is tokens per block.
	BlockSize int `json:"block"`
	// HotWindow and Sinks are the tokens kept uncompressed at the end and
	// at the start of the sequence (0 for an uncompressed cache).
	HotWindow int `json:"hot"`
	Sinks     int `json:"sinks"`
	// Boundary lists the layers kept bf16, as indices from 0, ascending.
	Boundary []int `json:"boundary"`
	// Sliding lists the sliding-window layers of a model that also has
	// full layers (Gemma), whose blocks stay hot (uncompressed) until they
	// slide out of the window, whatever codecs the plan names: their
	// memory is bounded by the window. A model whose every layer slides
	// (Mistral) lists none: its layers are coded as the plan says.
	Sliding []int `json:"sliding,omitempty"`
	// Precondition and Codebooks say whether keys are whitened and whether
	// any codec uses the calibration's codebooks.
	Precondition bool `json:"precond"`
	Codebooks    bool `json:"cb"`
	// CacheType is the storage of uncompressed blocks, bf16 or f32.
	CacheType string `json:"cache_type"`
	// Layers holds a per-layer plan's codecs (K and V are then empty).
	Layers []LayerPlan `json:"layers,omitempty"`
	// Preset names the preset the settings were written as (PresetName),
	// "" when they were spelled out.
	Preset string `json:"preset,omitempty"`
	// Warning is what kvplan.NewPolicy found wrong without it being an
	// error: a compressed cache that never encodes a block within the
	// model's context (see NothingCompressed); nil when all is well. Tools
	// print it (in the words of their flags, kvflags.Error); reports do
	// not record it.
	Warning error `json:"-"`
}

// Compressed reports whether any codec is in effect.
func (st Settings) Compressed() bool { return st.K != "" || st.V != "" || len(st.Layers) > 0 }

// FirstEncoded returns how many tokens a sequence holds when the cache
// encodes its first block: the sinks rounded up to whole blocks, one
// block, and the hot window (a block is encoded once it is full, past the
// sinks and older than the hot window); math.MaxInt when that overflows,
// and 0 for an uncompressed cache.
func (st Settings) FirstEncoded() int {
	bs := st.BlockSize
	if !st.Compressed() || bs <= 0 {
		return 0
	}
	if bs > math.MaxInt/4 || st.Sinks > math.MaxInt-2*bs {
		return math.MaxInt
	}
	n := (st.Sinks+bs-1)/bs*bs + bs
	if st.HotWindow > math.MaxInt-n {
		return math.MaxInt
	}
	return n + st.HotWindow
}

// NothingCompressed returns a warning, a *SettingError, when a compressed
// cache encodes no block of a sequence of up to n tokens because the hot
// window and the sinks cover it all, and nil otherwise (an uncompressed
// cache, or n <= 0, unknown). Such a cache costs and measures as much as
// an uncompressed one.
func (st Settings) NothingCompressed(n int) error {
	first := st.FirstEncoded()
	if first == 0 || n <= 0 || first <= n {
		return nil
	}
	need := fmt.Sprintf("%d tokens", first)
	if first == math.MaxInt {
		need = fmt.Sprintf("more than %d tokens", n)
	}
	return Errorf("nothing will be compressed: with {hot-window} %d, {sinks} %d and %d-token blocks the first block is encoded once a sequence holds %s, and sequences here hold at most %d; lower {hot-window} or {sinks} (or {block-size})",
		st.HotWindow, st.Sinks, st.BlockSize, need, n)
}

// String describes the settings in one line, e.g. "k=int8 v=int8 block 64,
// hot 64, boundary 0;23, bf16 hot blocks".
func (st Settings) String() string {
	if !st.Compressed() {
		return fmt.Sprintf("uncompressed %s, block %d", st.CacheType, st.BlockSize)
	}
	side := func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}
	var b strings.Builder
	if len(st.Layers) > 0 {
		fmt.Fprintf(&b, "per-layer k/v %s, block %d, hot %d", FormatLayerCodecs(st.Layers), st.BlockSize, st.HotWindow)
	} else {
		fmt.Fprintf(&b, "k=%s v=%s block %d, hot %d", side(st.K), side(st.V), st.BlockSize, st.HotWindow)
	}
	if st.Sinks > 0 {
		fmt.Fprintf(&b, ", sinks %d", st.Sinks)
	}
	if len(st.Boundary) > 0 {
		b.WriteString(", boundary ")
		for i, l := range st.Boundary {
			if i > 0 {
				b.WriteByte(';')
			}
			b.WriteString(strconv.Itoa(l))
		}
	}
	if st.Precondition {
		b.WriteString(", preconditioned")
	}
	if st.Codebooks {
		b.WriteString(", calibrated codebooks")
	}
	fmt.Fprintf(&b, ", %s hot blocks", st.CacheType)
	if st.Preset != "" {
		fmt.Fprintf(&b, ", preset %s", st.Preset)
	}
	return b.String()
}
