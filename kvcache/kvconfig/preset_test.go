package kvconfig

import (
	"slices"
	"strings"
	"testing"
)

// TestPreset: "kakeya" alone resolves to the preset, a codec per side,
// each setting the Spec names itself wins over the preset's, and a Kakeya
// spec with anything of
// the per-block-basis codec (a bit width, codec parameters, a per-side
// codec, preconditioning, calibrated codebooks) keeps meaning that codec.
func TestPreset(t *testing.T) {
	const pc, pk, pv = "kakeya-pc:rate=2.5", PresetKCodec, PresetVCodec
	tests := []struct {
		name   string
		spec   Spec
		preset bool
		k, v   string
		block  int // Checked.Spec.BlockSize: 0 leaves kvplan's default
		hot    int
		bound  []int
	}{
		{"preset", Spec{KV: "kakeya"}, true, pk, pv, PresetBlock, PresetHotWindow, nil},
		{"case and spaces", Spec{KV: " Kakeya "}, true, pk, pv, PresetBlock, PresetHotWindow, nil},
		{"f32 hot blocks", Spec{KV: "kakeya", CacheType: "f32"}, true, pk, pv, PresetBlock, PresetHotWindow, nil},
		{"precond off", Spec{KV: "kakeya", Precondition: Off, Codebooks: Off}, true, pk, pv, PresetBlock, PresetHotWindow, nil},
		{"sinks", Spec{KV: "kakeya", Sinks: 4}, true, pk, pv, PresetBlock, PresetHotWindow, nil},
		{"hot window wins", Spec{KV: "kakeya", HotWindow: 64}, true, pk, pv, PresetBlock, 64, nil},
		{"no hot window", Spec{KV: "kakeya", HotWindow: -1}, true, pk, pv, PresetBlock, -1, nil},
		{"block size wins", Spec{KV: "kakeya", BlockSize: 32}, true, pk, pv, 32, PresetHotWindow, nil},
		{"boundary wins", Spec{KV: "kakeya", Boundary: "0,-1"}, true, pk, pv, PresetBlock, PresetHotWindow, []int{0, -1}},
		{"b=3 unchanged", Spec{KV: "kakeya:b=3"}, false, "kakeya-block:b=3", "kakeya-block:b=3", 0, 0, []int{0, -1}},
		{"bits", Spec{KV: "kakeya", KBits: 3, VBits: 2}, false, "kakeya-block:b=3", "kakeya-block:b=2", 0, 0, []int{0, -1}},
		{"one side's bits", Spec{KV: "kakeya", VBits: 4}, false, "kakeya-block", "kakeya-block:b=4", 0, 0, []int{0, -1}},
		{"codec parameter", Spec{KV: "kakeya:rank=4"}, false, "kakeya-block:rank=4", "kakeya-block:rank=4", 0, 0, []int{0, -1}},
		{"keys only", Spec{K: "kakeya"}, false, "kakeya-block", "", 0, 0, []int{0, -1}},
		{"per-side codec", Spec{KV: "kakeya", V: "int4"}, false, "kakeya-block", "int4", 0, 0, []int{0, -1}},
		{"precond", Spec{KV: "kakeya", Precondition: On}, false, "kakeya-block", "kakeya-block", 0, 0, []int{0, -1}},
		{"codebooks", Spec{KV: "kakeya", Codebooks: On}, false, "kakeya-block", "kakeya-block", 0, 0, []int{0, -1}},
		{"kakeya-pc spelled out", Spec{KV: pc}, false, pc, pc, 0, 0, []int{0, -1}},
		{"preset's codecs spelled out", Spec{K: "kakeya-pc:rate=1.3,maxbits=5,codedfrac=0.25", V: "kakeya-pc:rate=2.5"}, false, pk, pv, 0, 0, []int{0, -1}},
	}
	for _, tt := range tests {
		if got := tt.spec.IsPreset(); got != tt.preset {
			t.Errorf("%s: IsPreset() = %v, want %v", tt.name, got, tt.preset)
		}
		c, err := tt.spec.Check()
		if err != nil {
			t.Errorf("%s: Check: %v", tt.name, err)
			continue
		}
		wantPreset := ""
		if tt.preset {
			wantPreset = PresetName
		}
		if c.Preset != wantPreset || c.KCodec != tt.k || c.VCodec != tt.v || c.Spec.BlockSize != tt.block ||
			c.Spec.HotWindow != tt.hot || !slices.Equal(c.Boundary, tt.bound) {
			t.Errorf("%s: Check = preset %q, k %q, v %q, block %d, hot %d, boundary %v; want %q, %q, %q, %d, %d, %v",
				tt.name, c.Preset, c.KCodec, c.VCodec, c.Spec.BlockSize, c.Spec.HotWindow, c.Boundary,
				wantPreset, tt.k, tt.v, tt.block, tt.hot, tt.bound)
		}
		// The preset's Spec names its codecs per side, as a Spec written
		// with k= and v= would.
		if tt.preset && (c.Spec.KV != "" || c.Spec.K != pk || c.Spec.V != pv) {
			t.Errorf("%s: Check.Spec codecs kv %q, k %q, v %q; want \"\", %q, %q", tt.name, c.Spec.KV, c.Spec.K, c.Spec.V, pk, pv)
		}
		// The settings a preset leaves alone pass through.
		if c.Spec.Sinks != tt.spec.Sinks || c.Spec.CacheType != tt.spec.CacheType {
			t.Errorf("%s: Check changed sinks or cache type: %+v", tt.name, c.Spec)
		}
	}
}

// The preset's text form is the one people write: kv=kakeya parses to it,
// and kv=kakeya:b=3 does not.
func TestPresetParse(t *testing.T) {
	for _, tt := range []struct {
		in     string
		preset bool
	}{
		{"kv=kakeya", true},
		{"kv=kakeya,hot=16,boundary=0;-1", true},
		{"kv=kakeya:b=3", false},
		{"kv=kakeya,kbits=3", false},
		{"k=kakeya,v=kakeya", false},
	} {
		s, err := Parse(tt.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.in, err)
		}
		if s.IsPreset() != tt.preset {
			t.Errorf("Parse(%q).IsPreset() = %v, want %v", tt.in, !tt.preset, tt.preset)
		}
	}
}

// The settings line names each side's codec and the preset the settings
// came from.
func TestSettingsPreset(t *testing.T) {
	st := Settings{K: PresetKCodec, V: PresetVCodec, BlockSize: PresetBlock, HotWindow: PresetHotWindow, CacheType: "bf16", Preset: PresetName}
	const want = "k=kakeya-pc:codedfrac=0.25,maxbits=5,rate=1.3 v=kakeya-pc:rate=2.5 block 64, hot 32, bf16 hot blocks, preset kakeya"
	if got := st.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// The --kv-codec help names the preset's codec of each side, its block
// size and hot window.
func TestPresetHelp(t *testing.T) {
	const want = "kakeya alone is the kakeya preset: keys kakeya-pc:codedfrac=0.25,maxbits=5,rate=1.3, values kakeya-pc:rate=2.5, on every layer in blocks of 64 with a hot window of 32"
	for _, k := range Grammar() {
		if k.Name == "kv-codec" {
			if !strings.Contains(k.Usage, want) {
				t.Errorf("kv-codec usage %q does not say %q", k.Usage, want)
			}
			return
		}
	}
	t.Fatal("no kv-codec key in Grammar()")
}
