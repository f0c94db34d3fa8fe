package model

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
	refbackend "github.com/kakeya-ai/kakeya/compute/reference"
	"github.com/kakeya-ai/kakeya/internal/shareddata"
	"github.com/kakeya-ai/kakeya/internal/testmodel"
	"github.com/kakeya-ai/kakeya/kvcache"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/kvcache/kvplan"
	"github.com/kakeya-ai/kakeya/pick"
)

// batchCaches are the cache settings the batch tests give their
// sequences, one each, so one step mixes them.
var batchCaches = []string{"plain", "plain-bf16", "int8", "int4", "kakeya-block:b=3"}

// cacheOptions returns the sequence options of a batchCaches name: the
// plain float32 or bf16 cache, or every layer's K and V encoded by a codec
// in 8-token blocks outside a hot window of one block.
func cacheOptions(t testing.TB, m *Model, name string) SequenceOptions {
	t.Helper()
	switch name {
	case "plain":
		return SequenceOptions{}
	case "plain-bf16":
		return SequenceOptions{Cache: kvcache.Policy{HotBF16: true}}
	}
	spec := kvconfig.Spec{KV: name, BlockSize: 8, HotWindow: 8, Boundary: "none", CacheType: "f32"}
	p, _, err := kvplan.NewPolicy(spec, m.CacheShape(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return SequenceOptions{Cache: p, BlockSize: 8}
}

// batchRun is one sequence of a batch test: a prompt fed in chunks from
// step join on, then greedy decoding; every step's logits are recorded.
type batchRun struct {
	opts   SequenceOptions
	prompt []int
	chunks []int // the prompt's chunk lengths, in order
	join   int   // the step of the first chunk
	all    bool  // whether prompt chunks ask for every row's logits

	seq    *Sequence
	fed    int         // prompt tokens fed
	next   int         // the greedy token to feed once the prompt is in
	tokens []int       // the greedy tokens generated
	logits [][]float32 // every step's logits, copied
}

// item returns the run's part of step st, or false if it sits the step out.
func (r *batchRun) item(st int) (BatchItem, bool) {
	if st < r.join {
		return BatchItem{}, false
	}
	if r.fed < len(r.prompt) {
		n := r.chunks[r.chunksFed()]
		return BatchItem{Seq: r.seq, IDs: r.prompt[r.fed : r.fed+n], All: r.all}, true
	}
	return BatchItem{Seq: r.seq, IDs: []int{r.next}}, true
}

// chunksFed returns how many of the prompt's chunks were fed.
func (r *batchRun) chunksFed() int {
	sum, i := 0, 0
	for sum < r.fed {
		sum += r.chunks[i]
		i++
	}
	return i
}

// record takes the logits of an item the run fed.
func (r *batchRun) record(it BatchItem) {
	r.logits = append(r.logits, slices.Clone(it.Logits))
	vocab := len(it.Logits)
	if it.All {
		vocab /= len(it.IDs)
	}
	if r.fed < len(r.prompt) {
		r.fed += len(it.IDs)
		if r.fed < len(r.prompt) {
			return
		}
	} else {
		r.tokens = append(r.tokens, r.next)
	}
	r.next = pick.ArgMax(it.Logits[len(it.Logits)-vocab:])
}

// solo replays the run alone through Sequence.Forward: the same chunks,
// then greedy decoding on its own tokens, for steps decode steps.
func (r *batchRun) solo(t *testing.T, m *Model, steps int) (logits [][]float32, tokens []int) {
	t.Helper()
	s, err := m.NewSequenceOpts(r.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last []float32
	vocab := m.Config().VocabSize
	for i, fed := 0, 0; fed < len(r.prompt); i++ {
		l, err := s.Forward(r.prompt[fed:fed+r.chunks[i]], r.all)
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, slices.Clone(l))
		last = l[len(l)-vocab:]
		fed += r.chunks[i]
	}
	for range steps {
		next := pick.ArgMax(last)
		tokens = append(tokens, next)
		l, err := s.Forward([]int{next}, false)
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, slices.Clone(l))
		last = l
	}
	return logits, tokens
}

// A batched step computes for each sequence what the sequence computes
// alone, bit for bit: mixed prompt lengths, sequences joining while others
// decode (prefill chunks and decode tokens in one step), a different cache
// per sequence (float32, bf16, int8, int4, kakeya), on the tiny seeded
// checkpoints (Mistral's sliding window included), the real ref-qwen2-6m
// and on the reference backend too. Bit-identical holds because every
// CPU matrix product computes a row by one arithmetic whatever the rows
// beside it (the kernels' batch invariance), and attention runs per
// sequence as it does alone. Greedy decoding then picks the same tokens
// for 20 steps.
func TestBatchMatchesSequential(t *testing.T) {
	dirs := tinyModels(t)
	dirs["mistral-window"] = filepath.Join(t.TempDir(), "mistral-window")
	// A window of 20 tokens: the codecs' blocks (8 tokens, a hot window
	// of 8) are encoded before they slide out, and the newest stay.
	mistral := testmodel.MistralTiny
	mistral.SlidingWindow = 20
	if err := testmodel.Write(dirs["mistral-window"], mistral); err != nil {
		t.Fatal(err)
	}
	const decodeSteps = 20
	for _, tc := range []struct {
		model   string
		backend string // "cpu" or "reference"
	}{
		{"qwen2", "cpu"},
		{"llama3", "cpu"},
		{"qwen3", "cpu"},
		{"mistral-window", "cpu"},
		{"ref-qwen2-6m", "cpu"},
		{"qwen2", "reference"},
	} {
		t.Run(tc.model+"/"+tc.backend, func(t *testing.T) {
			dir := dirs[tc.model]
			if dir == "" {
				dir = shareddata.File(t, "models", tc.model)
			}
			var b compute.Backend = refbackend.Backend{}
			if tc.backend == "cpu" {
				b = cpuBackend(t, 2, "")
			}
			m := load(t, dir, Options{Backend: b, MaxContext: 128})
			vocab := m.Config().VocabSize
			bt, err := m.NewBatch(64)
			if err != nil {
				t.Fatal(err)
			}
			// Prompt lengths, their chunking and the step each sequence
			// joins at differ, so steps mix prefill chunks and decode
			// tokens of sequences at different positions.
			specs := []struct {
				chunks []int
				join   int
				all    bool
			}{
				{[]int{5}, 0, false},
				{[]int{17, 4}, 0, true},
				{[]int{1}, 2, false},
				{[]int{9, 9, 9}, 1, false},
				{[]int{12}, 4, true},
			}
			var runs []*batchRun
			for i, sp := range specs {
				n := 0
				for _, c := range sp.chunks {
					n += c
				}
				ids := testIDs(n+i, vocab)[i:]
				r := &batchRun{opts: cacheOptions(t, m, batchCaches[i]), prompt: ids, chunks: sp.chunks, join: sp.join, all: sp.all}
				if r.seq, err = m.NewSequenceOpts(r.opts); err != nil {
					t.Fatal(err)
				}
				defer r.seq.Close()
				runs = append(runs, r)
			}
			var items []BatchItem
			var owners []*batchRun
			mixed := false
			for st := 0; ; st++ {
				items, owners = items[:0], owners[:0]
				prefill, decoding := false, false
				for _, r := range runs {
					if len(r.tokens) == decodeSteps {
						continue
					}
					if it, ok := r.item(st); ok {
						items = append(items, it)
						owners = append(owners, r)
						if r.fed < len(r.prompt) {
							prefill = true
						} else {
							decoding = true
						}
					}
				}
				if len(items) == 0 {
					break
				}
				mixed = mixed || (prefill && decoding)
				if err := bt.Forward(items); err != nil {
					t.Fatalf("step %d: %v", st, err)
				}
				for i, it := range items {
					owners[i].record(it)
				}
			}
			if !mixed {
				t.Fatal("no step mixed prefill chunks and decode tokens")
			}
			for i, r := range runs {
				want, wantTokens := r.solo(t, m, decodeSteps)
				if len(r.logits) != len(want) {
					t.Fatalf("sequence %d (%s): %d steps batched, %d alone", i, batchCaches[i], len(r.logits), len(want))
				}
				for st := range want {
					if d := maxAbsDiff(r.logits[st], want[st]); d != 0 || len(r.logits[st]) != len(want[st]) {
						t.Errorf("sequence %d (%s): its step %d: %d logits differ by %g from its solo run, want bit-identical",
							i, batchCaches[i], st, len(r.logits[st]), d)
					}
				}
				if st := r.seq.KVStats(); r.opts.BlockSize != 0 && st.Compressed == 0 {
					t.Errorf("sequence %d (%s): no block was encoded", i, batchCaches[i])
				}
				if !slices.Equal(r.tokens, wantTokens) {
					t.Errorf("sequence %d (%s): greedy tokens %v batched, %v alone", i, batchCaches[i], r.tokens, wantTokens)
				}
			}
		})
	}
}

// A bad step fails before it runs, naming the item and the value, and
// leaves every sequence usable.
func TestBatchBadItems(t *testing.T) {
	dirs := tinyModels(t)
	m := load(t, dirs["qwen2"], Options{Backend: cpuBackend(t, 1, ""), MaxContext: 32})
	other := load(t, dirs["llama3"], Options{Backend: cpuBackend(t, 1, ""), MaxContext: 32})
	bt, err := m.NewBatch(16)
	if err != nil {
		t.Fatal(err)
	}
	newSeq := func(m *Model) *Sequence {
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a, b, foreign, closed := newSeq(m), newSeq(m), newSeq(other), newSeq(m)
	closed.Close()
	if _, err := a.Forward(testIDs(30, 64), false); err != nil {
		t.Fatal(err)
	}
	vocab := m.Config().VocabSize
	for _, tc := range []struct {
		name  string
		items []BatchItem
		want  string
	}{
		{"no items", nil, "batch step of no items"},
		{"nil sequence", []BatchItem{{IDs: []int{1}}}, "batch item 0: nil sequence"},
		{"empty ids", []BatchItem{{Seq: b, IDs: []int{1}}, {Seq: a}}, "batch item 1: no token ids"},
		{"same sequence twice", []BatchItem{{Seq: b, IDs: []int{1}}, {Seq: a, IDs: []int{1}}, {Seq: b, IDs: []int{2}}}, "batch items 0 and 2 are the same sequence"},
		{"another model", []BatchItem{{Seq: foreign, IDs: []int{1}}}, "batch item 0: the sequence belongs to another model"},
		{"closed", []BatchItem{{Seq: b, IDs: []int{1}}, {Seq: closed, IDs: []int{1}}}, "batch item 1: model: the sequence is closed"},
		{"over the context", []BatchItem{{Seq: b, IDs: []int{1}}, {Seq: a, IDs: []int{1, 2, 3}}}, "batch item 1: the prompt is 33 tokens, more than the context of 32"},
		{"id out of range", []BatchItem{{Seq: b, IDs: []int{1, vocab}}}, fmt.Sprintf("batch item 0: token id %d at index 1 is out of range [0, %d)", vocab, vocab)},
		{"negative id", []BatchItem{{Seq: b, IDs: []int{-1}}}, "batch item 0: token id -1 at index 0 is out of range"},
		{"over the batch", []BatchItem{{Seq: b, IDs: testIDs(17, vocab)}}, "batch step of 17 tokens exceeds the batch's 16"},
		{"greedy with all", []BatchItem{{Seq: b, IDs: []int{1}, Greedy: true, All: true}}, "batch item 0: Greedy picks the last position's token"},
		{"greedy with hidden", []BatchItem{{Seq: b, IDs: []int{1}, Greedy: true, Hidden: true}}, "batch item 0: Greedy picks a token from logits"},
		{"hidden and logits", []BatchItem{{Seq: b, IDs: []int{1}, Hidden: true}, {Seq: a, IDs: []int{1}}}, "batch items 0 and 1: a step gives hidden states to every item"},
		{"draw with all", []BatchItem{{Seq: b, IDs: []int{1}, Draw: &compute.DrawRow{Temperature: 1}, All: true}}, "batch item 0: Draw draws the last position's token"},
		{"draw and greedy", []BatchItem{{Seq: b, IDs: []int{1}, Draw: &compute.DrawRow{Temperature: 1}, Greedy: true}}, "batch item 0: Draw draws the last position's token"},
		{"draw's uniform of 1", []BatchItem{{Seq: b, IDs: []int{1}}, {Seq: a, IDs: []int{1}, Draw: &compute.DrawRow{Temperature: 1, U: 1}}}, "batch item 1: draw of temperature 1, min-p 0, uniform 1"},
		{"draw's negative temperature", []BatchItem{{Seq: b, IDs: []int{1}, Draw: &compute.DrawRow{Temperature: -1}}}, "batch item 0: draw of temperature -1"},
		{"draw's min-p of 2", []BatchItem{{Seq: b, IDs: []int{1}, Draw: &compute.DrawRow{Temperature: 1, MinP: 2}}}, "batch item 0: draw of temperature 1, min-p 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := bt.Forward(tc.items)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Forward: err = %v, want one containing %q", err, tc.want)
			}
			if a.Len() != 30 || b.Len() != 0 {
				t.Errorf("after a refused step the sequences hold %d and %d tokens, want 30 and 0", a.Len(), b.Len())
			}
		})
	}
	if _, err := m.NewBatch(0); err == nil || !strings.Contains(err.Error(), "batch of at most 0 tokens") {
		t.Errorf("NewBatch(0): err = %v", err)
	}
	// The sequences stay usable after the refused steps.
	if err := bt.Forward([]BatchItem{{Seq: a, IDs: []int{1}}, {Seq: b, IDs: []int{2, 3}, All: true}}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if err := bt.Forward([]BatchItem{{Seq: a, IDs: []int{1}}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Forward on a closed model: err = %v, want ErrClosed", err)
	}
	if _, err := m.NewBatch(4); !errors.Is(err, ErrClosed) {
		t.Errorf("NewBatch on a closed model: err = %v, want ErrClosed", err)
	}
}

// errBroken is what brokenCodec's Decode returns.
var errBroken = errors.New("block does not decode")

// brokenCodec encodes blocks as float32 but cannot decode them, as a block
// whose bytes were corrupted.
type brokenCodec struct{ codec.Codec }

func (brokenCodec) Name() string { return "broken" }

func (brokenCodec) Decode([]float32, []byte, int, int) error { return errBroken }

// A sequence whose cache no longer decodes fails the batched step with an
// error naming its item and matching the failure; the step's sequences
// are unusable until Reset.
func TestBatchFailingSequence(t *testing.T) {
	m := load(t, tinyModels(t)["qwen2"], Options{Backend: cpuBackend(t, 1, ""), BlockSize: 4})
	f32, err := codec.Parse("f32")
	if err != nil {
		t.Fatal(err)
	}
	layers := make([]kvcache.LayerCodecs, m.Config().NumLayers)
	for i := range layers {
		layers[i] = kvcache.LayerCodecs{K: []codec.Codec{brokenCodec{f32}}, V: brokenCodec{f32}}
	}
	good, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	bad, err := m.NewSequenceWith(kvcache.Policy{Layers: layers, HotWindow: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bt, err := m.NewBatch(32)
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config().VocabSize
	// Twelve tokens fill three blocks; the first leaves the hot window and
	// is encoded, and attention over it fails.
	err = bt.Forward([]BatchItem{{Seq: good, IDs: testIDs(12, vocab)}, {Seq: bad, IDs: testIDs(12, vocab)}})
	if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), "batch item 1 (a sequence of 0 tokens)") {
		t.Fatalf("Forward: err = %v, want one naming item 1 and matching %v", err, errBroken)
	}
	for _, s := range []*Sequence{good, bad} {
		if _, err := s.Forward([]int{1}, false); err == nil || !strings.Contains(err.Error(), "unusable until Reset") {
			t.Errorf("Forward after the failed step: err = %v, want the sequence unusable", err)
		}
	}
}

// A steady batched decode step allocates nothing: the scratch, the host
// logits and the passes are grown by the first steps and reused.
func TestBatchAllocatesNothing(t *testing.T) {
	m := load(t, tinyModels(t)["qwen2"], Options{Backend: cpuBackend(t, 2, ""), BlockSize: 256})
	bt, err := m.NewBatch(64)
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config().VocabSize
	items := make([]BatchItem, 4)
	for i := range items {
		s, err := m.NewSequence()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		items[i] = BatchItem{Seq: s, IDs: testIDs(10+i, vocab)}
	}
	if err := bt.Forward(items); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		items[i].IDs = []int{i + 1}
	}
	allocs := testing.AllocsPerRun(50, func() {
		if err := bt.Forward(items); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("batched decode step of %d sequences allocates %v times, want 0", len(items), allocs)
	}
}

// A Greedy item on a backend that does not pick on its device gets its
// logits and, from them, the token its arg max picks: NaN skipped, the
// first of equal values, and where the first non-finite value is.
func TestBatchGreedyOnHost(t *testing.T) {
	m := load(t, tinyModels(t)["qwen2"], Options{Backend: cpuBackend(t, 1, ""), MaxContext: 32})
	if m.DeviceGreedy() {
		t.Fatal("the CPU backend picks on a device")
	}
	bt, err := m.NewBatch(16)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSequence()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	items := []BatchItem{{Seq: s, IDs: testIDs(5, 64), Greedy: true}}
	for range 4 {
		if err := bt.Forward(items); err != nil {
			t.Fatal(err)
		}
		it := items[0]
		best := 0
		for i, v := range it.Logits {
			if v > it.Logits[best] {
				best = i
			}
		}
		if it.Token != best || it.NonFinite != -1 {
			t.Fatalf("token %d, first non-finite %d; want %d, -1", it.Token, it.NonFinite, best)
		}
		items[0].IDs = []int{best}
	}
}

// A step of Hidden items gives each the final norm's output of each of
// its positions, as Sequence.Hidden gives them one sequence at a time:
// prefill chunks of different lengths, some continuing a sequence.
func TestBatchHidden(t *testing.T) {
	m := load(t, tinyModels(t)["qwen2"], Options{Backend: cpuBackend(t, 1, "f32"), MaxContext: 64})
	bt, err := m.NewBatch(32)
	if err != nil {
		t.Fatal(err)
	}
	h, vocab := m.Config().HiddenSize, m.Config().VocabSize
	prompts := [][]int{testIDs(3, vocab), testIDs(9, vocab)[2:], testIDs(14, vocab)[7:]}
	var seqs, solo []*Sequence
	for range prompts {
		for _, list := range []*[]*Sequence{&seqs, &solo} {
			s, err := m.NewSequence()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			*list = append(*list, s)
		}
	}
	// Two steps: the first takes each prompt's first half, the second the rest.
	for step := range 2 {
		items := make([]BatchItem, len(prompts))
		for i, p := range prompts {
			ids := p[:len(p)/2]
			if step == 1 {
				ids = p[len(p)/2:]
			}
			items[i] = BatchItem{Seq: seqs[i], IDs: ids, Hidden: true}
		}
		if err := bt.Forward(items); err != nil {
			t.Fatal(err)
		}
		for i, it := range items {
			want, err := solo[i].Hidden(it.IDs)
			if err != nil {
				t.Fatal(err)
			}
			if len(it.States) != len(it.IDs)*h || it.Logits != nil {
				t.Fatalf("step %d item %d: %d states and %d logits, want %d and none", step, i, len(it.States), len(it.Logits), len(it.IDs)*h)
			}
			for j := range want {
				if d := math.Abs(float64(it.States[j] - want[j])); d > 1e-5*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("step %d item %d [%d] = %g, Sequence.Hidden %g", step, i, j, it.States[j], want[j])
				}
			}
		}
	}
}
