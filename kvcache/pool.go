package kvcache

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/kakeya-ai/kakeya/codec"
	"github.com/kakeya-ai/kakeya/compute"
)

// ErrPoolFull is matched (errors.Is) by a *PoolFullError.
var ErrPoolFull = errors.New("kvcache: block pool full")

// PoolFullError is returned when an allocation in a Pool would exceed its
// byte budget even after every unreferenced cached block was evicted.
type PoolFullError struct {
	Need, Free, Budget int64
	// Reserve marks a reservation the ledger refused (Free is then the
	// uncommitted bytes; see Ledger.Reserve), not an allocation.
	Reserve bool
}

func (e *PoolFullError) Error() string {
	if e.Reserve {
		return fmt.Sprintf("kvcache: block pool full: a reservation of %d more bytes exceeds the %d uncommitted of a budget of %d", e.Need, e.Free, e.Budget)
	}
	return fmt.Sprintf("kvcache: block pool full: need %d bytes, %d free of a budget of %d", e.Need, e.Free, e.Budget)
}

// Is makes errors.Is(err, ErrPoolFull) match.
func (e *PoolFullError) Is(target error) bool { return target == ErrPoolFull }

// PoolConfig sizes a Pool.
type PoolConfig struct {
	// Store holds the parts, in the memory of the backend that attends
	// over them; made for BlockSize x HeadDim parts, bf16 when HotBF16.
	Store              compute.BlockStore
	BlockSize, HeadDim int
	HotBF16            bool
	// Budget is the most bytes the pool's parts may hold, hot and encoded.
	Budget int64
}

// A Pool is the block memory shared by the caches of many sequences (all
// those of an engine), under one byte budget. It accounts the real bytes of
// every part it holds: hot bytes while a part is hot, the codec's bytes once
// it is encoded. A full block that is final (see Cache.AppendTokens) is
// registered under a hash of its tokens, positions and cache configuration
// and reference-counted; a new sequence can attach it (Cache.AttachPrefix).
// Blocks no sequence references stay cached until an allocation needs their
// bytes, then they are evicted least recently used first.
//
// A Pool is safe for concurrent use: one mutex serializes every use of its
// store, which is used by one goroutine at a time.
type Pool struct {
	mu     sync.Mutex
	cfg    PoolConfig
	hot    int64 // bytes of one hot part
	used   int64
	peak   int64 // the most used ever
	cached int64 // bytes of the blocks in lru
	// The ledger (see Ledger): the caches' reservations, and the bytes of
	// the registered blocks some cache references.
	reserved, shared int64
	parts            map[compute.Part]partInfo
	byFormat         map[string]int64
	blocks           map[[32]byte]*poolBlock
	lru              list.List // of *poolBlock with no reference, least recent first

	referenced                  int
	queries, hits, hitTokens    int64
	queryTokens                 int64
	evictions, evictedBytes     int64
	registered, duplicateBlocks int64
}

// partInfo is what the pool counts for one part.
type partInfo struct {
	bytes  int64
	format string
}

// A poolBlock is the KV of BlockSize positions across all layers and KV
// heads, shared by reference: parts[layer][head*2 + (0 K | 1 V)].
type poolBlock struct {
	hash  [32]byte
	parts [][]compute.Part
	refs  int
	elem  *list.Element // in lru while refs == 0
	// passed counts, per layer, the referencing caches whose sliding
	// window passed the block (nil until one did; see passLayer).
	passed []int
	bytes  int64 // what its parts hold: in the pool's shared bytes while referenced, cached ones in lru
}

// NewPool returns an empty pool.
func NewPool(cfg PoolConfig) (*Pool, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("kvcache: pool has no block store")
	case cfg.BlockSize <= 0 || cfg.HeadDim <= 0:
		return nil, fmt.Errorf("kvcache: pool BlockSize %d and HeadDim %d must be > 0", cfg.BlockSize, cfg.HeadDim)
	case cfg.Budget <= 0:
		return nil, fmt.Errorf("kvcache: pool Budget = %d bytes, want > 0", cfg.Budget)
	}
	hot := int64(cfg.BlockSize*cfg.HeadDim) * 4
	if cfg.HotBF16 {
		hot /= 2
	}
	return &Pool{cfg: cfg, hot: hot, parts: map[compute.Part]partInfo{}, byFormat: map[string]int64{}, blocks: map[[32]byte]*poolBlock{}}, nil
}

func (p *Pool) hotFormat() string {
	if p.cfg.HotBF16 {
		return "hot-bf16"
	}
	return "hot-f32"
}

// makeRoom makes room for need more bytes, evicting cached blocks least
// recently used first; p.mu is held.
func (p *Pool) makeRoom(need int64) error {
	for p.used+need > p.cfg.Budget {
		if !p.evictOldest() {
			return &PoolFullError{Need: need, Free: p.cfg.Budget - p.used, Budget: p.cfg.Budget}
		}
	}
	return nil
}

// evictOldest evicts the least recently used cached block, reporting
// false when none is cached; p.mu is held.
func (p *Pool) evictOldest() bool {
	e := p.lru.Front()
	if e == nil {
		return false
	}
	b := e.Value.(*poolBlock)
	p.lru.Remove(e)
	b.elem = nil
	p.cached -= b.bytes
	delete(p.blocks, b.hash)
	before := p.used
	for _, l := range b.parts {
		for _, pt := range l {
			if pt != nil { // a sliding layer's part may have been released
				p.release(pt)
			}
		}
	}
	p.evictions++
	p.evictedBytes += before - p.used
	return true
}

// release returns a part to the store and its bytes to the budget; p.mu is
// held.
func (p *Pool) release(pt compute.Part) {
	if pi, ok := p.parts[pt]; ok {
		p.used -= pi.bytes
		p.byFormat[pi.format] -= pi.bytes
		if p.byFormat[pi.format] == 0 {
			delete(p.byFormat, pi.format)
		}
		delete(p.parts, pt)
	}
	p.cfg.Store.Release(pt)
}

// info returns what the pool counts for a part.
func (p *Pool) info(pt compute.Part) partInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parts[pt]
}

// register makes final block b of cache c shared under hash, with one
// reference (c's), its bytes moving from c's reservation to the pool's
// shared bytes at once. It returns nil when a block of that hash is
// already registered: the cache keeps its own copy.
func (p *Pool) register(c *Cache, b int, hash [32]byte, parts [][]compute.Part) *poolBlock {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.blocks[hash]; ok {
		p.duplicateBlocks++
		return nil
	}
	pb := &poolBlock{hash: hash, parts: parts, refs: 1, bytes: p.partsBytes(parts)}
	for li := range c.layers {
		if l := &c.layers[li]; l.window > 0 && l.nextOut > b {
			// A sliding layer released its parts before the block was
			// final (a window shorter than the hot window): c passed it.
			if pb.passed == nil {
				pb.passed = make([]int, len(parts))
			}
			pb.passed[li]++
		}
	}
	p.shared += pb.bytes
	p.blocks[hash] = pb
	p.referenced++
	p.registered++
	c.registered(b, pb)
	return pb
}

// acquire adds a reference to the block of hash, nil when none is cached;
// p.mu is held.
func (p *Pool) acquire(hash [32]byte) *poolBlock {
	b := p.blocks[hash]
	if b == nil {
		return nil
	}
	if b.refs == 0 {
		p.lru.Remove(b.elem)
		b.elem = nil
		p.cached -= b.bytes
		p.shared += b.bytes
		p.referenced++
	}
	b.refs++
	return b
}

// unref drops a reference; a block no longer referenced stays cached as
// the most recently used.
func (p *Pool) unref(b *poolBlock) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.refs--
	for li := range b.passed {
		p.dropPassed(b, li) // the others may all have passed it
	}
	if b.refs == 0 {
		// No sequence can change an unreferenced block's parts, so its
		// bytes hold until it is acquired or evicted.
		p.shared -= b.bytes
		b.bytes = p.partsBytes(b.parts)
		p.cached += b.bytes
		b.elem = p.lru.PushBack(b)
		p.referenced--
	}
}

// partsBytes returns the bytes the pool counts for a block's parts; p.mu
// is held.
func (p *Pool) partsBytes(parts [][]compute.Part) int64 {
	var n int64
	for _, l := range parts {
		for _, pt := range l {
			if pt != nil {
				n += p.parts[pt].bytes
			}
		}
	}
	return n
}

// Evict drops every cached block no sequence references and returns the
// bytes it freed.
func (p *Pool) Evict() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := p.used
	for p.evictOldest() {
	}
	return before - p.used
}

// PoolStats is a snapshot of a pool's accounting.
type PoolStats struct {
	// Used and Budget are bytes; ByFormat splits Used by the format the
	// parts are held in: "hot-f32", "hot-bf16" or a codec's name.
	Used, Budget int64
	ByFormat     map[string]int64
	// Peak is the most bytes the pool ever held at once.
	Peak int64
	// CachedBytes is the part of Used held by cached blocks no sequence
	// references: memory an allocation reclaims by evicting them.
	CachedBytes int64
	// Cached is the number of registered blocks no sequence references,
	// Referenced those at least one does.
	Cached, Referenced int
	// Queries counts AttachPrefix calls, Hits those that reused a block,
	// QueryTokens the tokens they looked up, HitTokens the tokens reused.
	Queries, Hits, QueryTokens, HitTokens int64
	// Evictions counts cached blocks evicted to make room, EvictedBytes
	// the bytes that freed.
	Evictions, EvictedBytes int64
	// Reserved is the sequences' reservations and Shared the bytes of the
	// registered blocks they reference: together the bytes the ledger has
	// committed (see Ledger), never more than Budget.
	Reserved, Shared int64
}

// String formats the stats on one line, formats sorted by name.
func (s PoolStats) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "pool %d/%d bytes", s.Used, s.Budget)
	names := make([]string, 0, len(s.ByFormat))
	for f := range s.ByFormat {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		fmt.Fprintf(&sb, " %s=%d", f, s.ByFormat[f])
	}
	fmt.Fprintf(&sb, ", blocks %d referenced %d cached, prefix %d/%d hits (%d tokens), %d evictions",
		s.Referenced, s.Cached, s.Hits, s.Queries, s.HitTokens, s.Evictions)
	return sb.String()
}

// Stats returns the pool's accounting.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PoolStats{Used: p.used, Budget: p.cfg.Budget, ByFormat: make(map[string]int64, len(p.byFormat)),
		Cached: p.lru.Len(), Referenced: p.referenced, Queries: p.queries, Hits: p.hits, QueryTokens: p.queryTokens, HitTokens: p.hitTokens,
		Evictions: p.evictions, EvictedBytes: p.evictedBytes, Peak: p.peak, CachedBytes: p.cached,
		Reserved: p.reserved, Shared: p.shared}
	for f, n := range p.byFormat {
		s.ByFormat[f] = n
	}
	return s
}

// poolStore is the pool's store as a cache uses it: every call locked, and
// every part's bytes counted against the budget.
type poolStore struct{ p *Pool }

func (s poolStore) AttendsEncoded(dec compute.Decoder) bool {
	ea, ok := s.p.cfg.Store.(compute.EncodedAttention)
	return ok && ea.AttendsEncoded(dec)
}

func (s poolStore) NewPart() (compute.Part, error) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.makeRoom(p.hot); err != nil {
		return nil, err
	}
	pt, err := p.cfg.Store.NewPart()
	if err != nil {
		return nil, err
	}
	f := p.hotFormat()
	p.parts[pt] = partInfo{bytes: p.hot, format: f}
	p.used += p.hot
	p.peak = max(p.peak, p.used)
	p.byFormat[f] += p.hot
	return pt, nil
}

func (s poolStore) Write(pt compute.Part, row int, src compute.Buffer, stride, rows int) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.cfg.Store.Write(pt, row, src, stride, rows)
}

func (s poolStore) Read(dst []float32, pt compute.Part) error {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	return s.p.cfg.Store.Read(dst, pt)
}

func (s poolStore) SetEncoded(pt compute.Part, enc []byte, dec compute.Decoder) error {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.parts[pt]
	if grow := int64(len(enc)) - old.bytes; grow > 0 {
		if err := p.makeRoom(grow); err != nil {
			return err
		}
	}
	if err := p.cfg.Store.SetEncoded(pt, enc, dec); err != nil {
		return err
	}
	p.encoded(pt, old, int64(len(enc)), dec)
	return nil
}

// EncodedLen forwards to the pool's store when it encodes parts itself.
func (s poolStore) EncodedLen(dec compute.Decoder) (int, bool) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	if pe, ok := s.p.cfg.Store.(compute.PartEncoder); ok {
		return pe.EncodedLen(dec)
	}
	return 0, false
}

// EncodePart has the pool's store encode pt, counting its encoded bytes
// as SetEncoded does.
func (s poolStore) EncodePart(pt compute.Part, dec compute.Decoder) error {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	pe, ok := p.cfg.Store.(compute.PartEncoder)
	var size int
	if ok {
		size, ok = pe.EncodedLen(dec)
	}
	if !ok {
		return fmt.Errorf("kvcache: the pool's store does not encode %s blocks itself", dec.Name())
	}
	old := p.parts[pt]
	if grow := int64(size) - old.bytes; grow > 0 {
		if err := p.makeRoom(grow); err != nil {
			return err
		}
	}
	if err := pe.EncodePart(pt, dec); err != nil {
		return err
	}
	p.encoded(pt, old, int64(size), dec)
	return nil
}

// EncodeParts has the pool's store encode ps, each by the decoder of the
// same index, in one call where the store takes several
// (compute.PartsEncoder), counting their encoded bytes as EncodePart
// does: the growth of all of them is reserved first.
func (s poolStore) EncodeParts(ps []compute.Part, decs []compute.Decoder) error {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(ps) != len(decs) {
		return fmt.Errorf("kvcache: %d parts to encode with %d codecs", len(ps), len(decs))
	}
	pe, ok := p.cfg.Store.(compute.PartEncoder)
	if !ok {
		return fmt.Errorf("kvcache: the pool's store does not encode blocks itself")
	}
	sizes := make([]int, len(ps))
	olds := make([]partInfo, len(ps))
	var grow int64
	for i, dec := range decs {
		size, ok := pe.EncodedLen(dec)
		if !ok {
			return fmt.Errorf("kvcache: the pool's store does not encode %s blocks itself", dec.Name())
		}
		sizes[i], olds[i] = size, p.parts[ps[i]]
		grow += max(0, int64(size)-olds[i].bytes)
	}
	if grow > 0 {
		if err := p.makeRoom(grow); err != nil {
			return err
		}
	}
	var err error
	if pse, ok := p.cfg.Store.(compute.PartsEncoder); ok {
		err = pse.EncodeParts(ps, decs)
	} else {
		for i := range ps {
			if err = pe.EncodePart(ps[i], decs[i]); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	for i := range ps {
		p.encoded(ps[i], olds[i], int64(sizes[i]), decs[i])
	}
	return nil
}

// encoded counts pt, whose bytes were old, as holding size bytes of dec's
// encoding, unless the store keeps it in hot memory; p.mu is held.
func (p *Pool) encoded(pt compute.Part, old partInfo, size int64, dec compute.Decoder) {
	if hd, ok := pt.(compute.HotDecoded); ok && hd.HotDecoded() {
		return // still the hot memory it had
	}
	n := partInfo{bytes: size, format: dec.Name()}
	p.used += n.bytes - old.bytes
	p.peak = max(p.peak, p.used)
	p.byFormat[old.format] -= old.bytes
	if p.byFormat[old.format] == 0 {
		delete(p.byFormat, old.format)
	}
	p.byFormat[n.format] += n.bytes
	p.parts[pt] = n
}

func (s poolStore) Release(pt compute.Part) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.release(pt)
}

// policyKey names a cache configuration for block hashes: the geometry,
// the hot dtype, the sinks and every codec by name and identity (a codec
// value behind a pointer is named by its address too, so two calibrations
// of one codec never share blocks).
func policyKey(cfg *Config) []byte {
	var sb strings.Builder
	p := &cfg.Policy
	fmt.Fprintf(&sb, "L%d H%d D%d B%d bf16=%t sinks=%d windows=%v", cfg.Layers, cfg.KVHeads, cfg.HeadDim, cfg.BlockSize, p.HotBF16, p.Sinks, cfg.Windows)
	name := func(c codec.Codec) {
		if c == nil {
			sb.WriteString(" -")
			return
		}
		fmt.Fprintf(&sb, " %s/%T", c.Name(), c)
		if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer {
			fmt.Fprintf(&sb, "@%x", v.Pointer())
		}
	}
	for l := range p.Layers {
		fmt.Fprintf(&sb, " |%d", l)
		for h := 0; h < cfg.KVHeads; h++ {
			name(p.KCodec(l, h))
		}
		name(p.VCodec(l))
	}
	sum := sha256.Sum256([]byte(sb.String()))
	return sum[:]
}

// blockHash chains the hash of block b: it covers the previous block's hash
// (so the whole prefix), the configuration, the block's index (its
// positions) and its tokens.
func blockHash(prev [32]byte, key []byte, b int, tokens []int) [32]byte {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(key)
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(b))
	h.Write(buf[:])
	for _, t := range tokens {
		binary.LittleEndian.PutUint64(buf[:], uint64(t))
		h.Write(buf[:])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}
