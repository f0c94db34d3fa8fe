package kakeya

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kakeya-ai/kakeya/calibrate"
	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/tokenizer"
	"github.com/kakeya-ai/kakeya/weights"

	"github.com/kakeya-ai/kakeya/internal/boundedfile"
)

// DefaultCalibrationTokens is how many tokens of the built-in calibration
// text (calibrate.Text) an automatic calibration runs the model over when
// Options.CalibrationTokens is 0: enough for the principal components of
// 64-token blocks (about 60 blocks per layer side), bounded so that a
// calibration of a 0.5B model takes seconds on a CPU.
const DefaultCalibrationTokens = 4096

// calibVersion names the recipe of an automatic calibration in its cache
// key: change it when Run's options or the way the text is cut change, so
// that files made the old way are not reused.
const calibVersion = "kakeya-autocalib-1"

// keyPrefixBytes is how much of each weights file the cache key hashes.
const keyPrefixBytes = 1 << 20

// A CalibrationInfo says where an engine's calibration came from.
type CalibrationInfo struct {
	// Path is the calibration file in use: Options.Calibration, or the
	// cache file an automatic calibration was read from or written to;
	// "" without a calibration, or when an automatic one could not be
	// written and lives in memory only.
	Path string
	// Auto reports an automatic calibration: the cache needed one and
	// Options.Calibration named none.
	Auto bool
	// Made reports that Load ran the automatic calibration (rather than
	// reading it from the cache), and Took how long that took.
	Made bool
	Took time.Duration
}

// String describes the calibration as the tools' settings line ends:
// "calibration FILE", "calibration auto: FILE", "calibration auto (in
// memory)", or "" without one.
func (ci CalibrationInfo) String() string {
	switch {
	case !ci.Auto && ci.Path == "":
		return ""
	case !ci.Auto:
		return "calibration " + ci.Path
	case ci.Path == "":
		return "calibration auto (in memory)"
	}
	return "calibration auto: " + ci.Path
}

// DefaultCalibrationCache returns the directory automatic calibrations are
// kept in when Options.CalibrationCache is "": kakeya/calib under
// os.UserCacheDir ($XDG_CACHE_HOME or ~/.cache on Linux).
func DefaultCalibrationCache() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kakeya: calibration cache: %w", err)
	}
	return filepath.Join(dir, "kakeya", "calib"), nil
}

// autoCalibration makes the calibration a cache needs when none is given:
// principal components over blocks of blockSize tokens and RoPE-averaged
// query factors, as kakeya-eval calibrate --pca --rope-avg --bits none
// --data builtin --tokens N --block-size B makes them. It is read from
// the calibration cache when a file for this model and recipe is there,
// else run on the built-in text and written there. An unreadable cached
// file is replaced, and a cache that cannot be written leaves the
// calibration in memory: both with a warning, neither an error.
type autoCalibration struct {
	model     *model.Model // runs the calibration on its own backend
	modelDir  string       // the model's directory or GGUF file, for the key; "" for model.Dir()
	tok       *tokenizer.Tokenizer
	blockSize int
	tokens    int    // tokens of the text to run, > 0
	weights   string // Options.Weights the model was loaded with
	cacheDir  string // "" for Options' default
	log       *slog.Logger
	progress  func(done, total int) // nil for none
}

// run returns the calibration and where it came from.
func (a autoCalibration) run(ctx context.Context) (*codec.Calibration, CalibrationInfo, error) {
	info := CalibrationInfo{Auto: true}
	if a.modelDir == "" {
		a.modelDir = a.model.Dir()
	}
	if a.tokens <= a.blockSize {
		return nil, info, fmt.Errorf("kakeya: Options.CalibrationTokens %d: an automatic calibration measures blocks of %d tokens and needs more than one block of text", a.tokens, a.blockSize)
	}
	dir, path := a.cacheDir, ""
	if dir == "" {
		var err error
		if dir, err = DefaultCalibrationCache(); err != nil {
			a.log.Warn("kakeya: no calibration cache; calibrating in memory", "err", err)
		}
	}
	if dir != "" {
		key, err := a.key()
		if err != nil {
			return nil, info, err
		}
		path = filepath.Join(dir, key+".safetensors")
		cal, err := calibrate.Load(path, a.model.Config())
		switch {
		case err == nil && cal.KPCA != nil && cal.VPCA != nil:
			a.log.Debug("kakeya: calibration from the cache", "file", path)
			info.Path = path
			return cal, info, nil
		case err == nil:
			a.log.Warn("kakeya: cached calibration has no principal components; recalibrating", "file", path)
		case !errors.Is(err, fs.ErrNotExist):
			a.log.Warn("kakeya: cached calibration unreadable; recalibrating", "file", path, "err", err)
		}
	}

	start := time.Now()
	text := calibrate.Text()
	ids := a.tok.Encode(text, false)
	cal, err := calibrate.RunModel(ctx, a.model, ids, calibrate.Options{
		MaxTokens: a.tokens, RopeAveraged: true, PCA: true, BlockSize: a.blockSize,
		Progress: a.progressFunc(),
	})
	if err != nil {
		return nil, info, fmt.Errorf("kakeya: automatic calibration on %d tokens of the built-in text: %w", a.tokens, err)
	}
	sum := sha256.Sum256([]byte(text))
	cal.Meta["data"] = calibrate.BuiltinData
	cal.Meta["data_sha256"] = hex.EncodeToString(sum[:])
	info.Made, info.Took = true, time.Since(start)
	if path != "" {
		if err := saveCalibration(dir, path, cal); err != nil {
			a.log.Warn("kakeya: calibration cache not writable; calibration kept in memory", "err", err)
			path = ""
		}
	}
	info.Path = path
	where := path
	if where == "" {
		where = "(in memory)"
	}
	a.log.Info(fmt.Sprintf("kakeya: calibrated the KV cache on %s tokens of the built-in text in %.1fs", cal.Meta["tokens"], info.Took.Seconds()),
		"model", filepath.Base(a.modelDir), "file", where)
	return cal, info, nil
}

// progressFunc returns calibrate.Run's Progress for a.progress, nil for
// none.
func (a autoCalibration) progressFunc() func(calibrate.Progress) {
	if a.progress == nil {
		return nil
	}
	return func(p calibrate.Progress) { a.progress(p.Tokens, p.TotalTokens) }
}

// saveCalibration writes cal to path in dir, making dir first: atomically
// (calibrate.Save writes a temporary file and renames it), so a reader
// never sees half a file.
func saveCalibration(dir, path string, cal *codec.Calibration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return calibrate.Save(path, cal)
}

// key names the cache file of this model and recipe: the model
// directory's base name and 16 hex digits of a SHA-256 over the recipe
// (calibVersion, block size, tokens, the built-in text, the quantization
// Options.Weights gave the weights when set), config.json and,
// per weights file (*.safetensors, sorted by name), its name, size and
// first MiB; for a GGUF file, its name, size and first MiB (its metadata
// first). Sizes and leading bytes rather than modification times, so
// that a copied or re-downloaded model keeps its calibration while
// changed weights (their header and first tensors) do not.
func (a autoCalibration) key() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\nblock %d\ntokens %d\n", calibVersion, a.blockSize, a.tokens)
	if a.weights != "" {
		// Quantized as they loaded: the calibration ran on other weights.
		fmt.Fprintf(h, "weights %s\n", a.weights)
	}
	text := sha256.Sum256([]byte(calibrate.Text()))
	h.Write(text[:])
	if weights.IsGGUF(a.modelDir) {
		// A GGUF file: its metadata (the configuration) and first
		// tensors lead the file.
		if err := hashPrefix(h, a.modelDir); err != nil {
			return "", fmt.Errorf("kakeya: calibration cache key: %w", err)
		}
		return keyName(a.modelDir, h), nil
	}
	cfg, err := boundedfile.Read(filepath.Join(a.modelDir, "config.json"), weights.MaxConfigBytes)
	if err != nil {
		return "", fmt.Errorf("kakeya: calibration cache key: %w", err)
	}
	fmt.Fprintf(h, "config.json %d\n", len(cfg))
	h.Write(cfg)
	files, err := filepath.Glob(filepath.Join(a.modelDir, "*.safetensors"))
	if err != nil {
		return "", fmt.Errorf("kakeya: calibration cache key: %w", err)
	}
	slices.Sort(files)
	for _, f := range files {
		if err := hashPrefix(h, f); err != nil {
			return "", fmt.Errorf("kakeya: calibration cache key: %w", err)
		}
	}
	return keyName(a.modelDir, h), nil
}

// keyName is the cache file's name: the model's base name and 16 hex
// digits of h's sum.
func keyName(model string, h hash.Hash) string {
	name := strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, filepath.Base(model))
	return name + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// hashPrefix writes a weights file's name, size and first keyPrefixBytes
// into h.
func hashPrefix(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	io.WriteString(h, filepath.Base(path)+" "+strconv.FormatInt(fi.Size(), 10)+"\n")
	if _, err := io.CopyN(h, f, keyPrefixBytes); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
