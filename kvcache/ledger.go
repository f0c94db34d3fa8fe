package kvcache

import (
	"errors"
	"fmt"
)

// The pool's byte ledger: the one account of what the sequences in a pool
// may still come to hold, which admission asks and which lets a sequence
// grow without the pool filling under it.
//
// The pool counts, besides the bytes its parts hold (Used):
//
//   - reserved: the sum of the sequences' reservations. A cache's
//     reservation covers its private bytes (every block it holds but the
//     registered ones it references) on its way to the length it reserved
//     for: Ledger.Cost of that length less the estimate of its registered
//     blocks.
//   - shared: the real bytes of the registered blocks at least one cache
//     references, counted once however many share them.
//
// Committed = reserved + shared never exceeds the budget (Reserve refuses
// what would pass it), and the bytes the sequences reference never exceed
// Committed, so an allocation of a sequence within its reservation always
// finds room once the unreferenced cached blocks are evicted: after
// admission said yes, the pool does not fill. (It still can where real
// blocks outgrow the estimate, a codec whose block sizes vary with the data
// beyond the 1/64 margin; allocation then fails with ErrPoolFull, never
// silently. A codec the store keeps hot-decoded is estimated hot: see
// Sizer.)

// A Ledger sizes and reserves the sequences of one cache configuration in a
// pool: Cost says what a sequence of n tokens may come to hold, Admits
// whether the pool can take one more, Reserve and Release hold and return
// a cache's bytes. A scheduler asks it and orders by its own policy. A
// Ledger is safe for concurrent use; a cache's reservation is changed by
// the goroutine that writes the cache.
type Ledger struct {
	pool *Pool
	cfg  Config
	key  []byte  // policyKey of cfg: the prefix blocks' hashes
	cost []int64 // cost[n]: Cost(n)
	// hotBlock and oldBlock are what one block position takes in the full
	// layers, hot and once it left the hot window: the estimate of a
	// registered block, by whether it holds a sink (hotBlock) or not.
	hotBlock, oldBlock int64
	variable           bool
	maxToks            int
}

// NewLedger measures cfg's blocks (see Sizer) and returns its ledger in
// cfg.Pool, which must be set.
func NewLedger(cfg Config) (*Ledger, error) {
	if cfg.Pool == nil {
		return nil, errors.New("kvcache: a ledger needs a cache configuration with a pool")
	}
	z, err := cfg.Sizer()
	if err != nil {
		return nil, err
	}
	l := &Ledger{pool: cfg.Pool, cfg: cfg, key: policyKey(&cfg), hotBlock: z.hot, oldBlock: z.old, variable: z.variable}
	chunk := cfg.SlideChunk
	if chunk == 0 {
		chunk = cfg.MaxTokens
	}
	// The bytes a sequence holds do not grow monotonically (a block
	// leaving the hot window shrinks when it is encoded), so a sequence is
	// held to the peak on its way. During one Append of a chunk ending at
	// m, the blocks it pushes out of the hot window are still hot in the
	// layer being appended until it encodes them (in one batch, one launch
	// on a GPU), while the layers before it hold their new length and
	// those after their old one: Bytes(m) plus that one layer's excess
	// bounds every moment. (A preempted sequence recomputes its history in
	// chunks of up to the step's tokens, so any m may end a whole chunk.)
	l.cost = make([]int64, cfg.MaxTokens+1)
	budget := cfg.Pool.cfg.Budget
	var peak int64
	for n := range l.cost {
		newly := z.encodedBlocks(n) - z.encodedBlocks(max(0, n-chunk))
		peak = max(peak, z.Bytes(n)+int64(newly)*z.layerExcess)
		c := peak
		if l.variable {
			// Real blocks of a variable codec may exceed the probes.
			c += c / 64
		}
		l.cost[n] = c
		if c <= budget {
			l.maxToks = n
		}
	}
	return l, nil
}

// Cost returns the most bytes a sequence of this configuration may hold on
// its way to n tokens (0 ≤ n ≤ MaxTokens of the configuration), with
// nothing shared: the peak, up to n, of BytesFor plus the hot excess of
// one layer's Append of a chunk before it encodes, and a margin of 1/64
// where a codec's block sizes vary with the data.
func (l *Ledger) Cost(n int) int64 {
	if n >= len(l.cost) {
		return l.cost[len(l.cost)-1] + 1 // more than any sequence may hold
	}
	return l.cost[max(n, 0)]
}

// MaxTokens returns the longest sequence the pool's whole budget holds (at
// most the configuration's MaxTokens).
func (l *Ledger) MaxTokens() int { return l.maxToks }

// blockEstimate returns the ledger's estimate of registered block b of the
// full layers: hot if it holds a sink, else as it is once old.
func (l *Ledger) blockEstimate(b int) int64 {
	if b*l.cfg.BlockSize < l.cfg.Policy.Sinks {
		return l.hotBlock
	}
	return l.oldBlock
}

// estimate returns the ledger's estimate of the registered blocks c
// references: their full layers' bytes as Cost counts them, and the real
// bytes of their sliding layers' parts that c still holds in its windows;
// the pool's mutex is held.
func (l *Ledger) estimate(c *Cache) int64 {
	return int64(c.share.sinkBlocks)*l.hotBlock + int64(c.share.regBlocks-c.share.sinkBlocks)*l.oldBlock + c.share.slideHeld
}

// need returns the reservation a cache whose registered blocks are
// estimated at est needs to reach n tokens.
func (l *Ledger) need(n int, est int64) int64 { return max(0, l.Cost(n)-est) }

// Admits reports whether the pool can take a new sequence that starts
// from the prompt tokens and reserves for n tokens: the committed bytes
// plus its reservation, less the prefix blocks it would attach (counted
// once, in shared, where a running sequence already references them; an
// unreferenced cached one joins shared when it is attached), within the
// budget.
func (l *Ledger) Admits(tokens []int, n int) bool {
	p := l.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	var prev [32]byte
	var est, cached int64
	bs := l.cfg.BlockSize
	for b := range l.cfg.attachBlocks(tokens) {
		pb := p.blocks[blockHash(prev, l.key, b, tokens[b*bs:(b+1)*bs])]
		if pb == nil {
			break
		}
		est += l.blockEstimate(b)
		if pb.refs == 0 {
			cached += pb.bytes
		}
		prev = pb.hash
	}
	return p.reserved+p.shared+l.need(n, est)+cached <= p.cfg.Budget
}

// Reserve makes c's reservation cover its way to n tokens (see Cost) less
// the registered blocks it references. A reservation that grows past what
// the pool has uncommitted fails with a *PoolFullError, leaving it as it
// was; one that shrinks always succeeds. c must be a cache of this
// ledger's pool; its reservation goes back when it is Reset (a closed
// sequence), or by Release.
func (l *Ledger) Reserve(c *Cache, n int) error {
	p := l.pool
	if c.cfg.Pool != p {
		return errors.New("kvcache: Reserve of a cache outside the ledger's pool")
	}
	if n < 0 || n > c.cfg.MaxTokens {
		return fmt.Errorf("kvcache: Reserve for %d tokens outside [0, %d]", n, c.cfg.MaxTokens)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	want := l.need(n, l.estimate(c))
	if grow := want - c.res; grow > 0 {
		if committed := p.reserved + p.shared; committed+grow > p.cfg.Budget {
			return &PoolFullError{Need: grow, Free: p.cfg.Budget - committed, Budget: p.cfg.Budget, Reserve: true}
		}
	}
	p.reserved += want - c.res
	c.res, c.ledger = want, l
	return nil
}

// Release returns c's reservation to the pool (its blocks stay).
func (l *Ledger) Release(c *Cache) {
	p := l.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reserved -= c.res
	c.res, c.ledger = 0, nil
}

// Reserved returns c's reservation in bytes.
func (c *Cache) Reserved() int64 {
	if c.cfg.Pool == nil {
		return 0
	}
	c.cfg.Pool.mu.Lock()
	defer c.cfg.Pool.mu.Unlock()
	return c.res
}

// registered accounts block b, pb in the pool, which c registered or
// attached: its reservation shrinks by the block's estimate (see
// Ledger.estimate), which the pool's shared bytes now hold; the pool's
// mutex is held.
func (c *Cache) registered(b int, pb *poolBlock) {
	c.share.regBlocks++
	if b*c.cfg.BlockSize < c.cfg.Policy.Sinks {
		c.share.sinkBlocks++
	}
	var slide int64
	for li := range c.layers {
		if c.layers[li].window > 0 {
			slide += c.cfg.Pool.partsBytes(pb.parts[li : li+1])
		}
	}
	c.share.slideHeld += slide
	if l := c.ledger; l != nil {
		d := min(c.res, l.blockEstimate(b)+slide)
		c.res -= d
		c.cfg.Pool.reserved -= d
	}
}

// slidPast accounts layer li of registered block pb, which c's window no
// longer sees: its parts leave c's estimate and their bytes return to c's
// reservation, which the window's next blocks take. They leave the pool's
// shared bytes too where c was the block's one reference and dropped them
// (dropped); a block others reference keeps them, shared, until the last
// reference goes: bytes the ledger then counts twice, erring on the safe
// side. The pool's mutex is held.
func (c *Cache) slidPast(pb *poolBlock, li int) {
	x := c.cfg.Pool.partsBytes(pb.parts[li : li+1])
	c.share.slideHeld -= x
	if c.ledger != nil {
		c.res += x
		c.cfg.Pool.reserved += x
	}
}

// Committed returns the bytes the pool has committed: the sequences'
// reservations and the registered blocks they reference (see Ledger).
func (p *Pool) Committed() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reserved + p.shared
}
