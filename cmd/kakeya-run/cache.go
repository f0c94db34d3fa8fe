package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
	"github.com/kakeya-ai/kakeya/weights"
)

// Block sizes when --block-size is not given. Codec blocks are larger
// because kakeya stores a basis per block: at head_dim 128 its bytes per
// value fall by about a quarter from 16 to 64 tokens, while int8 and int4
// barely change (docs/kvcache-flags.md has the figures).
const (
	defaultBlock      = 16
	defaultCodecBlock = 64
)

// defaultBoundary are the layers a codec leaves uncompressed unless
// --boundary says otherwise: the first and the last, the most sensitive
// to key/value error.
const defaultBoundary = "0,-1"

// cacheFlags are the KV cache settings of a run.
type cacheFlags struct {
	blockSize, maxContext int // blockSize 0: by whether a codec is set
	kv, k, v              string
	kBits, vBits          int
	hot                   optInt
	sinks                 int
	boundary              string
	calib                 string
	codebooks             optBool
	cacheType             string
}

// optInt is an int flag that remembers whether it was given.
type optInt struct {
	n   int
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.n)
}

func (o *optInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	o.n, o.set = n, true
	return nil
}

// optBool is a bool flag that remembers whether it was given.
type optBool struct{ v, set bool }

func (o *optBool) String() string {
	if o == nil {
		return "false"
	}
	return strconv.FormatBool(o.v)
}

func (o *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("not a boolean")
	}
	o.v, o.set = v, true
	return nil
}

func (o *optBool) IsBoolFlag() bool { return true }

func (c *cacheFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&c.blockSize, "block-size", 0, fmt.Sprintf("tokens per KV cache block (default %d, or %d when a codec is set)", defaultBlock, defaultCodecBlock))
	fs.IntVar(&c.maxContext, "ctx", 0, "context length in tokens (0 = the model's, at most 32768)")
	fs.StringVar(&c.kv, "kv-codec", "none", "KV cache codec for keys and values: none or one of "+strings.Join(codec.Names(), ", ")+
		` (a spec such as "kakeya:b=3,rank=4" also works)`)
	fs.StringVar(&c.k, "k-codec", "", "key codec spec, overriding --kv-codec for keys (none keeps keys uncompressed)")
	fs.StringVar(&c.v, "v-codec", "", "value codec spec, overriding --kv-codec for values (none keeps values uncompressed)")
	fs.IntVar(&c.kBits, "k-bits", 0, "bit width of the key codec, for codecs that have one (kakeya: 2, 3 or 4)")
	fs.IntVar(&c.vBits, "v-bits", 0, "bit width of the value codec, for codecs that have one (kakeya: 2, 3 or 4)")
	fs.Var(&c.hot, "hot-window", "the newest `N` tokens stay uncompressed (default one block)")
	fs.IntVar(&c.sinks, "sinks", 0, "first tokens kept uncompressed (attention sinks)")
	fs.StringVar(&c.boundary, "boundary", defaultBoundary, "layers that skip the codec and store bf16 blocks, comma-separated, negative from the end (none = compress every layer)")
	fs.StringVar(&c.calib, "calib", "", "calibration file (kakeya-eval calibrate): precondition each key codec by the model's query covariance")
	fs.StringVar(&c.cacheType, "cache-type", "bf16", "storage of uncompressed KV blocks: bf16, or f32 (exact, twice the memory)")
	// On by default: with a calibration they lowered KL in five of six
	// stories260K comparisons and tied in the sixth (README).
	c.codebooks = optBool{v: true}
	fs.Var(&c.codebooks, "calib-codebooks", "with --calib, kakeya codecs use its Lloyd-Max residual codebooks when it has them (=false: the Gaussian ones)")
}

// compressed reports whether a codec is set for K or V.
func (c *cacheFlags) compressed() bool {
	k, v := c.specs()
	return k != "" || v != ""
}

// specs returns the K and V codec specs the flags choose, "" for none.
func (c *cacheFlags) specs() (k, v string) {
	k, v = c.kv, c.kv
	if c.k != "" {
		k = c.k
	}
	if c.v != "" {
		v = c.v
	}
	if strings.EqualFold(k, "none") {
		k = ""
	}
	if strings.EqualFold(v, "none") {
		v = ""
	}
	return k, v
}

// options checks the flags and returns the model options they give, the
// cache policy aside: that needs the model's shape (see policy).
func (c *cacheFlags) options() (model.Options, error) {
	if _, err := c.spec(); err != nil {
		return model.Options{}, err
	}
	if c.blockSize < 0 {
		return model.Options{}, fmt.Errorf("--block-size %d must be > 0", c.blockSize)
	}
	if c.maxContext < 0 {
		return model.Options{}, fmt.Errorf("--ctx %d must be >= 0", c.maxContext)
	}
	return model.Options{BlockSize: c.block(), MaxContext: c.maxContext}, nil
}

// block returns the block size in effect.
func (c *cacheFlags) block() int {
	switch {
	case c.blockSize > 0:
		return c.blockSize
	case c.compressed():
		return defaultCodecBlock
	}
	return defaultBlock
}

// spec turns the flags into a model.CacheSpec, naming the flag at fault in
// errors.
func (c *cacheFlags) spec() (model.CacheSpec, error) {
	k, v := c.specs()
	kFlag, vFlag := "--kv-codec", "--kv-codec"
	if c.k != "" {
		kFlag = "--k-codec"
	}
	if c.v != "" {
		vFlag = "--v-codec"
	}
	var err error
	if k, err = withBits(k, c.kBits, kFlag, "--k-bits"); err != nil {
		return model.CacheSpec{}, err
	}
	if v, err = withBits(v, c.vBits, vFlag, "--v-bits"); err != nil {
		return model.CacheSpec{}, err
	}
	s := model.CacheSpec{K: k, V: v}
	switch strings.ToLower(c.cacheType) {
	case "f32", "":
	case "bf16":
		s.HotBF16 = true
	default:
		return model.CacheSpec{}, fmt.Errorf("--cache-type %q: want f32 or bf16", c.cacheType)
	}
	if c.calib != "" && k == "" {
		return model.CacheSpec{}, errors.New("--calib preconditions the key codec, but keys are uncompressed: set --kv-codec or --k-codec")
	}
	if c.codebooks.set && c.codebooks.v && c.calib == "" {
		return model.CacheSpec{}, errors.New("--calib-codebooks needs --calib")
	}
	if !s.Compressed() {
		return s, nil
	}
	if c.hot.set && c.hot.n < 0 {
		return model.CacheSpec{}, fmt.Errorf("--hot-window %d must be >= 0", c.hot.n)
	}
	if c.sinks < 0 {
		return model.CacheSpec{}, fmt.Errorf("--sinks %d must be >= 0", c.sinks)
	}
	s.HotWindow, s.Sinks = c.block(), c.sinks
	if c.hot.set {
		s.HotWindow = c.hot.n
	}
	if s.Boundary, err = model.ParseLayers(c.boundary); err != nil {
		return model.CacheSpec{}, fmt.Errorf("--boundary: %w", err)
	}
	s.Precondition = c.calib != ""
	s.Codebooks = c.codebooks.v && c.calib != ""
	if err := s.Validate(); err != nil {
		return model.CacheSpec{}, err
	}
	return s, nil
}

// withBits checks one side's codec spec (given by codecFlag) and applies
// the bit width of bitsFlag to it.
func withBits(spec string, bits int, codecFlag, bitsFlag string) (string, error) {
	if spec == "" {
		if bits != 0 {
			return "", fmt.Errorf("%s %d: no codec is set for that side (use %s)", bitsFlag, bits, codecFlag)
		}
		return "", nil
	}
	sp, err := codec.ParseSpec(spec)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", codecFlag, spec, err)
	}
	if bits != 0 {
		if sp.Name != "kakeya" {
			return "", fmt.Errorf("%s %d: codec %s has a fixed width (only kakeya takes a bit width)", bitsFlag, bits, sp.Name)
		}
		if sp.Bits != 0 && sp.Bits != bits {
			return "", fmt.Errorf("%s %d contradicts b=%d in %s %q", bitsFlag, bits, sp.Bits, codecFlag, spec)
		}
		sp.Bits = bits
	}
	if _, err := codec.New(sp); err != nil {
		if bits != 0 {
			return "", fmt.Errorf("%s %d: %w", bitsFlag, bits, err)
		}
		return "", fmt.Errorf("%s %q: %w", codecFlag, spec, err)
	}
	return sp.String(), nil
}

// policy builds the cache policy of the model in dir (a local model
// directory). Uncompressed runs need no model: their policy sets only the
// storage type of the blocks.
func (c *cacheFlags) policy(dir string) (kvcache.Policy, error) {
	s, err := c.spec()
	if err != nil || !s.Compressed() {
		return kvcache.Policy{HotBF16: s.HotBF16}, err
	}
	cfg, err := weights.LoadConfig(dir)
	if err != nil {
		return kvcache.Policy{}, err
	}
	var cal *codec.Calibration
	if s.Precondition {
		if cal, err = model.LoadCalibration(c.calib, cfg); err != nil {
			return kvcache.Policy{}, fmt.Errorf("--calib: %w", err)
		}
		// Codebooks by default means "the calibration's, when it has
		// any"; asked for explicitly, missing ones are an error.
		if !c.codebooks.set && len(cal.KCodebooks) == 0 && len(cal.VCodebooks) == 0 {
			s.Codebooks = false
		}
	}
	for _, l := range s.Boundary {
		if l >= cfg.NumLayers || l < -cfg.NumLayers {
			return kvcache.Policy{}, fmt.Errorf("--boundary %q: layer %d outside a model of %d layers", c.boundary, l, cfg.NumLayers)
		}
	}
	return model.NewPolicy(cfg, s, cal)
}

func loadTokenizer(dir string) (*tokenizer.Tokenizer, error) {
	return tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
}
