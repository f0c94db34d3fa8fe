package model

import (
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/model/arch"
)

// logitsOf says which rows of a pass get logits.
type logitsOf uint8

const (
	noRows  logitsOf = iota // none: a prefill chunk before the prompt's last
	lastRow                 // the pass's last row
	allRows                 // every row
)

// pass is one sequence's part of a forward step: n tokens appended to s
// at positions start.., and which rows' logits are wanted. The tokens' ids
// are in the step's scratch, pass after pass (see scratch.add): a pass
// holds no caller's slice, so the callers' ids stay off the heap.
type pass struct {
	s      *Sequence
	n      int
	start  int
	logits logitsOf
}

// wanted returns how many rows of logits p asks for.
func (p *pass) wanted() int {
	switch p.logits {
	case lastRow:
		return 1
	case allRows:
		return p.n
	}
	return 0
}

// scratch is the activation memory of forward steps of up to rows tokens,
// on the backend; it is grown, never shrunk, so steady steps allocate
// nothing.
type scratch struct {
	rows                     int
	x, xn, q, k, v, att, tmp compute.Buffer
	gate, up                 compute.Buffer
	logits                   compute.Buffer          // logitRows rows of vocab_size at most
	ids                      []int                   // the step's ids, so no caller's slice escapes to the backend
	pos                      []int                   // the step's rows' positions, for Fused.NormQKV
	attn                     []compute.AttentionPass // a layer's passes, for BatchAttention
	// picks, when set, asks the step for the arg max of every wanted row
	// on the device (compute.Greedy) rather than its logits; bad gets
	// where each row's first non-finite logit is.
	picks, bad []int
	// draws, when set with picks, asks for each wanted row's token drawn
	// on the device with its draw (compute.Draw) instead of its arg max.
	draws      []compute.DrawRow
	obsQ, obsK []float32 // q and k on the host for Options.Observe
	// hidden, when set, asks the step for the final norm's output of the
	// wanted rows, read into it, instead of their logits.
	hidden []float32
}

// grow makes sc hold steps of n tokens.
func (sc *scratch) grow(m *Model, n int) {
	if n <= sc.rows {
		return
	}
	c, b := m.cfg, m.b
	h, qd, kvd := c.HiddenSize, c.NumHeads*m.headDim, c.NumKVHeads*m.headDim
	sc.rows = n
	sc.x, sc.xn, sc.tmp = b.Alloc(n*h), b.Alloc(n*h), b.Alloc(n*h)
	sc.q, sc.att = b.Alloc(n*qd), b.Alloc(n*qd)
	sc.k, sc.v = b.Alloc(n*kvd), b.Alloc(n*kvd)
	sc.gate, sc.up = b.Alloc(n*c.IntermediateSize), b.Alloc(n*c.IntermediateSize)
	sc.ids, sc.pos = make([]int, 0, n), make([]int, 0, n)
	if m.observeAll != nil {
		sc.obsQ, sc.obsK = make([]float32, n*qd), make([]float32, n*kvd)
	}
}

// observe hands p's queries pq and keys pk of layer li, before RoPE, to
// Options.Observe and to p's sequence's SequenceOptions.Observe, those
// that are set, through sc's host buffers (grown on a sequence's first
// observed pass when the model has no hook of its own).
func (m *Model) observe(sc *scratch, li int, p *pass, pq, pk compute.Buffer) {
	so := p.s.observe
	if m.observeAll == nil && so == nil {
		return
	}
	r, qd, kvd := p.n, m.cfg.NumHeads*m.headDim, m.cfg.NumKVHeads*m.headDim
	if len(sc.obsQ) < r*qd || len(sc.obsK) < r*kvd {
		sc.obsQ, sc.obsK = make([]float32, max(r, sc.rows)*qd), make([]float32, max(r, sc.rows)*kvd)
	}
	q, k := sc.obsQ[:r*qd], sc.obsK[:r*kvd]
	m.b.Read(q, pq)
	m.b.Read(k, pk)
	if m.observeAll != nil {
		m.observeAll(li, p.start, r, q, k)
	}
	if so != nil {
		so(li, p.start, r, q, k)
	}
}

// observed reports whether some pass's queries and keys must be seen
// before RoPE (see observe).
func (m *Model) observed(passes []pass) bool {
	if m.observeAll != nil {
		return true
	}
	for i := range passes {
		if passes[i].s.observe != nil {
			return true
		}
	}
	return false
}

// add appends ids to the step's ids and returns a pass of them for s, of
// no logits; reset empties the step first.
func (sc *scratch) add(s *Sequence, ids []int) pass {
	sc.ids = append(sc.ids, ids...)
	return pass{s: s, n: len(ids), start: s.Len()}
}

// reset empties the step's ids.
func (sc *scratch) reset() { sc.ids = sc.ids[:0] }

// growLogits makes sc's logits hold rows rows. Decoding alone never holds
// more than one row per sequence: a large vocabulary makes 64 rows tens of
// MiB.
func (sc *scratch) growLogits(m *Model, rows int) {
	if n := rows * m.cfg.VocabSize; sc.logits.Len < n {
		sc.logits = m.b.Alloc(n)
	}
}

// step runs one forward step over passes, each one sequence's tokens at
// its own positions, their ids concatenated in sc.ids (which sc must have
// room for), the way llama2.c's forward() does for one token: every matrix
// product once over all the rows (a weight is read once per step),
// attention per sequence over its own cache. The architecture's
// description (m.desc, package arch) says how each step goes; the Llama
// family's is the plain path of every step. The logits asked for are
// written to dst, pass after pass, vocab_size values per row (or, when
// sc.picks is set, their arg max to sc.picks and sc.bad).
//
// On failure it returns the index of the pass whose sequence failed (-1
// when no one sequence did) and the error; every sequence of the step may
// then have keys and values of some layers appended and not of others.
func (m *Model) step(sc *scratch, passes []pass, dst []float32) (int, error) {
	c, b, a := m.cfg, m.b, m.desc
	h, d := c.HiddenSize, m.headDim
	heads, kvHeads := c.NumHeads, c.NumKVHeads
	qd, kvd, inter := heads*d, kvHeads*d, c.IntermediateSize
	n := len(sc.ids)
	x, xn, tmp := sc.x.Slice(0, n*h), sc.xn.Slice(0, n*h), sc.tmp.Slice(0, n*h)
	q, k, v, att := sc.q.Slice(0, n*qd), sc.k.Slice(0, n*kvd), sc.v.Slice(0, n*kvd), sc.att.Slice(0, n*qd)
	gate, up := sc.gate.Slice(0, n*inter), sc.up.Slice(0, n*inter)

	// Token embeddings: the residual stream starts as each token's row,
	// scaled where the architecture says (Gemma: by √hidden_size).
	b.Embed(x, m.embed, sc.ids)
	if a.EmbedScale != 0 {
		m.ops.Scale(x, a.EmbedScale)
	}
	for li := range m.layers {
		l := &m.layers[li]
		rp := &m.ropes[l.kind] // the layer kind's RoPE (Gemma 3: a base per kind)

		// Attention: normalise the stream, project it to queries, keys and
		// values (Qwen2 adds biases; Qwen3 and Gemma 3 normalise each head
		// of q and k). A backend with fused steps does it all in one,
		// rotating the queries too (rotated).
		rotated := m.fusedQKV(l, sc, q, k, v, x, passes)
		if !rotated {
			b.RMSNorm(xn, x, l.inNorm, n, m.eps)
			b.MatMul(q, xn, n, l.q)
			b.MatMul(k, xn, n, l.k)
			b.MatMul(v, xn, n, l.v)
			if l.qBias.Len > 0 {
				b.AddRows(q, l.qBias, n)
				b.AddRows(k, l.kBias, n)
				b.AddRows(v, l.vBias, n)
			}
			if l.qNorm.Len > 0 {
				b.RMSNorm(q, q, l.qNorm, n*heads, m.eps)
				b.RMSNorm(k, k, l.kNorm, n*kvHeads, m.eps)
			}
		}

		// Per sequence, at its own positions: keys and values enter its
		// cache before RoPE, so a codec sees them as the projection made
		// them (position-free, and whitenable by the query covariance);
		// queries are rotated here (unless the fused step did), keys by
		// attention at their positions. The layer kind's attention holds
		// its window, query scale and softcap. A backend that attends
		// over every sequence at once does so in one call (attendBatch).
		if m.batch != nil && len(passes) > 1 {
			if i, err := m.attendBatch(sc, li, passes, q, k, v, att, rotated); err != nil {
				return i, err
			}
		}
		for i, row := 0, 0; (m.batch == nil || len(passes) == 1) && i < len(passes); i++ {
			p := &passes[i]
			r := p.n
			pq, pk := q.Slice(row*qd, (row+r)*qd), k.Slice(row*kvd, (row+r)*kvd)
			m.observe(sc, li, p, pq, pk) // calibration sees queries and keys before RoPE
			if !rotated {
				b.RoPE(pq, r, heads, d, p.start, rp.cos, rp.sin)
			}
			if err := p.s.cache.Append(li, pk, v.Slice(row*kvd, (row+r)*kvd), r); err != nil {
				return i, err
			}
			if err := p.s.attn[l.kind].Forward(att.Slice(row*qd, (row+r)*qd), pq, r, p.start, p.s.cache.Layer(li), rp.cos, rp.sin); err != nil {
				return i, err
			}
			row += r
		}

		// Output projection, added to the residual stream (Gemma
		// normalises it first: the sandwich's post-attention norm).
		m.residual(x, att, tmp, n, l.o, l.oBias, l.attnOutNorm)

		// Feed-forward: a gated MLP, down(act(gate(x)) * up(x)) with SiLU
		// (SwiGLU) or GELU-tanh (Gemma's GeGLU), added to the residual
		// stream (with Llama's mlp_bias, each projection has a bias; Gemma
		// normalises the output first).
		if m.fused == nil || !m.fused.NormSwiGLU(gate, x, n, &l.mlp) {
			b.RMSNorm(xn, x, l.postNorm, n, m.eps)
			b.MatMul(gate, xn, n, l.gate)
			b.MatMul(up, xn, n, l.up)
			if l.gateBias.Len > 0 {
				b.AddRows(gate, l.gateBias, n)
				b.AddRows(up, l.upBias, n)
			}
			if a.Act == arch.GELUTanh {
				m.ops.GELUTanhMul(gate, up)
			} else {
				b.SiLUMul(gate, up)
			}
		}
		m.residual(x, gate, tmp, n, l.down, l.downBias, l.ffnOutNorm)
	}

	// Final norm and classifier in one fused step where the backend has
	// it and the rows whose logits are wanted are one run of x.
	if sc.hidden == nil && m.fusedLogits(sc, passes, x, dst) {
		return -1, nil
	}

	// Final norm of the rows whose logits are wanted, gathered at the top
	// of xn (each pass's last row, or all its rows): one call per run of
	// wanted rows that follow one another in x (a decode step's rows are
	// one run).
	want, lo, run := 0, 0, 0 // the pending run: rows lo.. of x, run of them
	for i, row := 0, 0; i < len(passes); i++ {
		p := &passes[i]
		r, w := p.n, p.wanted()
		if w > 0 {
			if first := row + r - w; run > 0 && first != lo+run {
				b.RMSNorm(xn.Slice((want-run)*h, want*h), x.Slice(lo*h, (lo+run)*h), m.norm, run, m.eps)
				run = 0
			}
			if run == 0 {
				lo = row + r - w
			}
			run += w
			want += w
		}
		row += r
	}
	if run > 0 {
		b.RMSNorm(xn.Slice((want-run)*h, want*h), x.Slice(lo*h, (lo+run)*h), m.norm, run, m.eps)
	}
	if want == 0 {
		return -1, nil
	}
	if sc.hidden != nil {
		b.Read(sc.hidden[:want*h], xn.Slice(0, want*h))
		return -1, nil
	}

	// The classifier into logits, at most logitRows rows per product so the
	// logits scratch stays small.
	vocab := c.VocabSize
	sc.growLogits(m, min(want, logitRows))
	for r := 0; r < want; r += logitRows {
		rows := min(logitRows, want-r)
		out := sc.logits.Slice(0, rows*vocab)
		b.MatMul(out, xn.Slice(r*h, (r+rows)*h), rows, m.lmHead)
		if a.FinalSoftcap != 0 {
			// Gemma 2 bounds the logits: cap·tanh(z/cap).
			m.ops.Softcap(out, a.FinalSoftcap)
		}
		m.readLogits(sc, dst[r*vocab:(r+rows)*vocab], out, r, rows)
	}
	return -1, nil
}

// attendBatch runs layer li's attention of a step of several sequences
// through the backend's compute.BatchAttention: each pass's keys and
// values appended to its cache, then one call over every pass, which
// rotates the queries unless the fused step did. On failure it returns the
// index of the pass whose sequence failed (-1 when no one did).
func (m *Model) attendBatch(sc *scratch, li int, passes []pass, q, k, v, att compute.Buffer, rotated bool) (int, error) {
	d := m.headDim
	heads, kind := m.cfg.NumHeads, m.layers[li].kind
	qd, kvd := heads*d, m.cfg.NumKVHeads*d
	sc.attn = sc.attn[:0]
	for i, row := 0, 0; i < len(passes); i++ {
		p := &passes[i]
		r := p.n
		pq, pk := q.Slice(row*qd, (row+r)*qd), k.Slice(row*kvd, (row+r)*kvd)
		m.observe(sc, li, p, pq, pk)
		if err := p.s.cache.Append(li, pk, v.Slice(row*kvd, (row+r)*kvd), r); err != nil {
			return i, err
		}
		sc.attn = append(sc.attn, compute.AttentionPass{Attention: p.s.attn[kind], KV: p.s.cache.Layer(li), N: r, Start: p.start})
		row += r
	}
	rp := &m.ropes[kind]
	err := m.batch.AttendBatch(att, q, !rotated, li, sc.attn, rp.cos, rp.sin)
	clear(sc.attn) // hold no sequence past the step
	return -1, err
}

// fusedQKV runs a layer's attention input as the backend's one fused step
// (compute.Fused.NormQKV), each row's queries rotated at its sequence's
// position, and reports whether it did: it does not when the backend has
// no such step or declines these rows, nor for a step whose queries and
// keys Options.Observe must see before RoPE.
func (m *Model) fusedQKV(l *layer, sc *scratch, q, k, v, x compute.Buffer, passes []pass) bool {
	if m.fused == nil || m.observed(passes) {
		return false
	}
	sc.pos = sc.pos[:0]
	for i := range passes {
		for r := range passes[i].n {
			sc.pos = append(sc.pos, passes[i].start+r)
		}
	}
	return m.fused.NormQKV(q, k, v, x, sc.pos, &l.qkv)
}

// fusedLogits writes to dst the logits of the rows the passes want
// through the backend's fused final norm and classifier
// (compute.Fused.NormMatMul), and reports whether it did: it does not
// when the backend has no such step or declines the rows, when no row is
// wanted, or when the wanted rows are not one run of x (each pass's last
// rows following the previous pass's).
func (m *Model) fusedLogits(sc *scratch, passes []pass, x compute.Buffer, dst []float32) bool {
	if m.fused == nil {
		return false
	}
	lo, want := 0, 0
	for i, row := 0, 0; i < len(passes); i++ {
		p := &passes[i]
		if w := p.wanted(); w > 0 {
			first := row + p.n - w
			if want > 0 && first != lo+want {
				return false
			}
			if want == 0 {
				lo = first
			}
			want += w
		}
		row += p.n
	}
	if want == 0 || want > logitRows {
		return false
	}
	h, vocab := m.cfg.HiddenSize, m.cfg.VocabSize
	sc.growLogits(m, want)
	out := sc.logits.Slice(0, want*vocab)
	if !m.fused.NormMatMul(out, x.Slice(lo*h, (lo+want)*h), m.norm, m.eps, want, m.lmHead) {
		return false
	}
	if c := m.desc.FinalSoftcap; c != 0 {
		m.ops.Softcap(out, c) // Gemma 2 bounds the logits: cap·tanh(z/cap)
	}
	m.readLogits(sc, dst[:want*vocab], out, 0, want)
	return true
}

// readLogits reads rows rows of logits from out, the wanted rows r..:
// their values into dst, or, when the step asks for picks, their arg
// max picked on the device.
func (m *Model) readLogits(sc *scratch, dst []float32, out compute.Buffer, r, rows int) {
	if sc.draws != nil {
		m.draw.Draw(sc.picks[r:r+rows], sc.bad[r:r+rows], out, m.cfg.VocabSize, sc.draws[r:r+rows])
		return
	}
	if sc.picks != nil {
		m.greedy.ArgMax(sc.picks[r:r+rows], sc.bad[r:r+rows], out, m.cfg.VocabSize)
		return
	}
	m.b.Read(dst, out)
}

// residual adds x times w transposed, plus bias when the layer has one,
// to the residual stream res, normalised first by RMSNorm of weight norm
// where the layer has one (Gemma's sandwich norms), through tmp; the norm
// and the add are one step where the backend has it (compute.NormAdder).
func (m *Model) residual(res, x, tmp compute.Buffer, n int, w compute.Weight, bias, norm compute.Buffer) {
	if norm.Len == 0 {
		m.matMulAdd(res, x, tmp, n, w, bias)
		return
	}
	b := m.b
	b.MatMul(tmp, x, n, w)
	if bias.Len > 0 {
		b.AddRows(tmp, bias, n)
	}
	if m.normAdd != nil {
		m.normAdd.NormAdd(res, tmp, norm, n, m.eps)
		return
	}
	b.RMSNorm(tmp, tmp, norm, n, m.eps)
	b.Add(res, tmp)
}

// matMulAdd adds x times w transposed, plus bias when the layer has one,
// to the residual stream res: in one fused step where the backend has it,
// else through tmp.
func (m *Model) matMulAdd(res, x, tmp compute.Buffer, n int, w compute.Weight, bias compute.Buffer) {
	if m.fused != nil && m.fused.MatMulAdd(res, x, n, w, bias) {
		return
	}
	b := m.b
	b.MatMul(tmp, x, n, w)
	if bias.Len > 0 {
		b.AddRows(tmp, bias, n)
	}
	b.Add(res, tmp)
}
