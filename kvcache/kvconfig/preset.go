package kvconfig

import "strings"

// The kakeya preset: what a cache written as the codec "kakeya" alone
// (--kv-codec kakeya, Spec{KV: "kakeya"}) runs. It is the configuration
// with the highest whole-cache ratio measured ACCEPT with a margin (top-1
// agreement >= 96.5%) on WikiText and TinyStories with ref-qwen2-6m under
// the calibration users get, the automatic one on the built-in text
// (docs/results/2026-11-26-kakeya-preset.md): kakeya-pc, a principal
// basis per layer side calibrated on the model and bits allocated per
// component, on every layer, with a short hot window. Rate 2 (7.83x on
// encoded blocks) fell below the margin on WikiText under that
// calibration. Chosen again on 2026-11-28 under the broader built-in
// text (docs/results/2026-11-28-calibration-broad.md): top-1 >= 97.5% and
// dPPL <= +0.5% on WikiText, TinyStories and Go documentation; the
// entropy-coded rows past it (5.47-5.55x whole cache) decode at well under
// 0.9x plain, so it stays. Each setting the Spec names itself (its block
// size, hot window, boundary layers) wins over the preset's.
const (
	// PresetName is the codec name that, written alone, selects the preset.
	PresetName = "kakeya"
	// PresetCodec is the preset's key and value codec.
	PresetCodec = "kakeya-pc:rate=2.5"
	// PresetBlock is the preset's block size, the one its calibration
	// measures principal components over.
	PresetBlock = 64
	// PresetHotWindow is the preset's hot window in tokens.
	PresetHotWindow = 32
	// PresetBoundary is the preset's boundary-layer list: none, every
	// layer is compressed.
	PresetBoundary = "none"
)

// IsPreset reports whether s selects the kakeya preset: its codec for keys
// and values is "kakeya" with no setting of the per-block-basis codec
// kakeya-block (format 5) — no codec parameters (kakeya:b=3,
// kakeya:rank=4), no bit width (KBits, VBits), no per-side codec (K, V),
// no per-layer plan, and neither Precondition nor Codebooks asked for,
// which only that codec uses. Such a Spec means kakeya-block, the old
// spelling "kakeya" of which codec.ParseSpec accepts with a deprecation
// message.
func (s Spec) IsPreset() bool {
	return strings.EqualFold(strings.TrimSpace(s.KV), PresetName) &&
		s.K == "" && s.V == "" && s.KBits == 0 && s.VBits == 0 && s.Layers == "" &&
		s.Precondition != On && s.Codebooks != On
}

// expandPreset returns the Spec the kakeya preset stands for, the settings
// s names itself kept.
func (s Spec) expandPreset() Spec {
	s.KV = PresetCodec
	if s.BlockSize == 0 {
		s.BlockSize = PresetBlock
	}
	if s.HotWindow == 0 {
		s.HotWindow = PresetHotWindow
	}
	if s.Boundary == "" {
		s.Boundary = PresetBoundary
	}
	return s
}
