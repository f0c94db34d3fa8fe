package kakeya

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
)

// Caches turns cache specs into the caches of one loaded model's
// sequences, with their calibration: the one assembly path of model,
// cache and calibration, which Load takes for its Options.Cache and
// kakeya-bench and kakeya-eval take for each cache they compare. A spec
// whose codecs need principal components gets Options.Calibration's file
// or, when it names none, the automatic calibration, made on the model
// itself (its backend, its precision, its weights; no second load) or
// read from Options.CalibrationCache: once per block size, however many
// specs share it. Its methods may be called from several goroutines.
type Caches struct {
	m   *model.Model
	opt Options // the Calibration* fields, Log and Weights

	mu   sync.Mutex
	tok  *tokenizer.Tokenizer // the model's, for the built-in text; loaded on first need
	file *codec.Calibration   // Options.Calibration's, loaded on first need
	auto map[int]autoResult   // automatic calibrations by block size
	used CalibrationInfo      // the calibration the last Cache used
	told map[string]bool      // the host-encoding warnings logged, by text
}

// autoResult is an automatic calibration and where it came from.
type autoResult struct {
	cal  *codec.Calibration
	info CalibrationInfo
}

// NewCaches returns the cache assembler of m, whose calibration follows
// opt's Calibration, CalibrationCache, CalibrationTokens,
// CalibrationProgress and Log; opt.Weights names the quantization m was
// loaded with, which an automatic calibration's cache key records. The
// other fields are not used. m stays the caller's.
func NewCaches(m *model.Model, opt Options) (*Caches, error) {
	if opt.CalibrationTokens < 0 {
		return nil, fmt.Errorf("kakeya: Options: CalibrationTokens %d, want > 0 (or 0 for the default)", opt.CalibrationTokens)
	}
	if opt.CalibrationTokens == 0 {
		opt.CalibrationTokens = DefaultCalibrationTokens
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	return &Caches{m: m, opt: opt, auto: map[int]autoResult{}, told: map[string]bool{}}, nil
}

// Cache resolves spec for the model: its defaults applied, its policy
// built with the calibration it uses (see Caches). It returns the options
// of a sequence with that cache, the settings in effect, and where the
// calibration came from (the zero CalibrationInfo for none).
func (c *Caches) Cache(ctx context.Context, spec kvconfig.Spec) (model.SequenceOptions, kvconfig.Settings, CalibrationInfo, error) {
	checked, err := spec.Check()
	if err != nil {
		return model.SequenceOptions{}, kvconfig.Settings{}, CalibrationInfo{}, fmt.Errorf("kakeya: cache: %w", err)
	}
	return c.cache(ctx, checked)
}

func (c *Caches) cache(ctx context.Context, spec kvconfig.Checked) (model.SequenceOptions, kvconfig.Settings, CalibrationInfo, error) {
	fail := func(err error) (model.SequenceOptions, kvconfig.Settings, CalibrationInfo, error) {
		return model.SequenceOptions{}, kvconfig.Settings{}, CalibrationInfo{}, err
	}
	bs, needPCA, err := kvplan.NeedsPCA(spec, c.m.CacheShape().MaxContext)
	if err != nil {
		return fail(fmt.Errorf("kakeya: cache: %w", err))
	}
	cal, info, err := c.calibration(ctx, bs, needPCA)
	if err != nil {
		return fail(err)
	}
	pol, st, err := kvplan.Build(spec, c.m.CacheShape(), cal)
	if err != nil {
		return fail(fmt.Errorf("kakeya: cache: %w", err))
	}
	opts := model.SequenceOptions{Cache: pol, BlockSize: st.BlockSize}
	if err := c.warnHostEncoded(opts, st); err != nil {
		return fail(fmt.Errorf("kakeya: cache: %w", err))
	}
	return opts, st, info, nil
}

// warnHostEncoded logs, once per Caches for each distinct set, the layer
// sides of a cache whose blocks a backend that encodes blocks itself (the
// CUDA device: int8, int4, int2 and kakeya-pc, int8, int4 and int2 keys
// preconditioned by a calibration, and bf16, the boundary layers' and a
// plan's "none", over bf16 or float32 hot rows) would read back and encode
// on the host (kakeya-block, also with preconditioned keys, and the other
// codecs):
// each block that fills waits for that round trip, one host wait per
// block and KV head, where a decode step otherwise makes one in all. It
// is a warning, not an error: the cache is correct and holds the same
// bytes as on the CPU, only slower to fill (as llama.cpp runs an
// operation its GPU backend lacks on the CPU); kakeya-eval sensitivity's
// default choices avoid it.
func (c *Caches) warnHostEncoded(o model.SequenceOptions, st kvconfig.Settings) error {
	sides, err := c.m.HostEncoded(o)
	if err != nil || len(sides) == 0 {
		return err
	}
	var parts []string
	byCodec := map[string][2][]string{}
	var order []string
	for _, s := range sides {
		name := sideSpec(st, s)
		l, ok := byCodec[name]
		if !ok {
			order = append(order, name)
		}
		l[s.KV] = append(l[s.KV], strconv.Itoa(s.Layer))
		byCodec[name] = l
	}
	for _, cd := range order {
		l := byCodec[cd]
		var which []string
		for kv, name := range [2]string{"keys", "values"} {
			if len(l[kv]) > 0 {
				which = append(which, name+" of layers "+strings.Join(l[kv], ","))
			}
		}
		parts = append(parts, cd+": "+strings.Join(which, "; "))
	}
	text := strings.Join(parts, " | ")
	c.mu.Lock()
	told := c.told[text]
	c.told[text] = true
	c.mu.Unlock()
	if !told {
		c.opt.Log.Warn("KV blocks encoded on the host: each block that fills is read back from the "+c.m.Backend().Name()+
			" device, encoded on the host and copied in, one host wait per block and KV head (int8, int4, int2 and kakeya-pc encode on the device, their keys preconditioned or not, and bf16)",
			"layers", text)
	}
	return nil
}

// calibration returns the calibration of a cache of block size bs:
// Options.Calibration's file, else with needPCA the automatic one, else
// none.
func (c *Caches) calibration(ctx context.Context, bs int, needPCA bool) (*codec.Calibration, CalibrationInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.opt.Calibration != "":
		if c.file == nil {
			cal, err := calibrate.Load(c.opt.Calibration, c.m.Config())
			if err != nil {
				return nil, CalibrationInfo{}, fmt.Errorf("kakeya: calibration: %w", err)
			}
			c.file = cal
		}
		c.warnBlockSize(bs, needPCA)
		return c.file, CalibrationInfo{Path: c.opt.Calibration}, nil
	case !needPCA:
		return nil, CalibrationInfo{}, nil
	}
	if r, ok := c.auto[bs]; ok {
		r.info.Made, r.info.Took = false, 0 // made by an earlier call, not this one
		return r.cal, r.info, nil
	}
	if c.tok == nil {
		tok, err := LoadTokenizer(c.m.Dir())
		if err != nil {
			return nil, CalibrationInfo{}, fmt.Errorf("kakeya: automatic calibration needs the model's tokenizer: %w", err)
		}
		c.tok = tok
	}
	a := autoCalibration{
		model: c.m, tok: c.tok, blockSize: bs, tokens: c.opt.CalibrationTokens,
		weights: c.opt.Weights, cacheDir: c.opt.CalibrationCache, log: c.opt.Log,
		progress: c.opt.CalibrationProgress,
	}
	cal, info, err := a.run(ctx)
	if err != nil {
		return nil, info, err
	}
	c.auto[bs] = autoResult{cal, info}
	return cal, info, nil
}

// warnBlockSize logs, once per block size, that Options.Calibration's file
// measured its principal components over blocks of another size than a
// cache of blocks of bs whose codecs read them (needPCA): the within-block
// covariance and the block means' variance they allocate bits from depend
// on the block size. A warning, not an error: the cache is correct, its
// allocation only fitted to other blocks (the automatic calibration makes
// one per block size). c.mu is held.
func (c *Caches) warnBlockSize(bs int, needPCA bool) {
	made := c.file.Meta["block_size"]
	if !needPCA || c.file.KPCA == nil || made == "" || made == strconv.Itoa(bs) {
		return
	}
	key := "calibration block " + strconv.Itoa(bs)
	if c.told[key] {
		return
	}
	c.told[key] = true
	c.opt.Log.Warn(fmt.Sprintf("kakeya: the calibration's principal components were measured over blocks of %s tokens, the cache's blocks are %d; "+
		"kakeya-eval calibrate --pca --block-size %d measures them for this cache", made, bs, bs), "file", c.opt.Calibration)
}

// sideSpec names the codec of a host-encoded side as the settings wrote
// it (the codec's own name where they do not say), keys marked when
// preconditioned.
func sideSpec(st kvconfig.Settings, s kvcache.HostSide) string {
	spec := [2]string{st.K, st.V}[s.KV]
	if s.Layer < len(st.Layers) {
		spec = [2]string{st.Layers[s.Layer].K, st.Layers[s.Layer].V}[s.KV]
	}
	if spec == "" || spec == "none" {
		spec = s.Codec
	}
	if s.KV == 0 && st.Precondition && !codec.IsPrincipal(spec) {
		spec += " (preconditioned)"
	}
	return spec
}
