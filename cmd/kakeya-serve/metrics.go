package main

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/scheduler"
)

// metrics are the server's Prometheus metrics, in a registry of its own:
// the engine's state read at each scrape (the gauges an inference gateway
// routes by, under vLLM's names, and the pool's accounting), and counters
// and histograms the requests add to as they end.
type metrics struct {
	reg *prometheus.Registry

	requests         *prometheus.CounterVec
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	ttft, tpot       prometheus.Histogram
	vllm             *vllmMetrics // the same and more under vLLM's names

	mu          sync.Mutex
	kvBytes     float64 // final KV bytes of the requests ended
	kvBF16Bytes float64 // what a bf16 cache of the same tokens would take
}

// newMetrics registers the metrics of the served model name; stats reads
// the engine's state, false while it loads.
func newMetrics(name string, stats func() (scheduler.Stats, bool)) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kakeya_requests_total",
			Help: "HTTP requests served, by endpoint and status code (499: the client went away).",
		}, []string{"endpoint", "code"}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kakeya_prompt_tokens_total",
			Help: "Prompt tokens of the generation requests that ran.",
		}),
		generationTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kakeya_generation_tokens_total",
			Help: "Tokens generated.",
		}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kakeya_time_to_first_token_seconds",
			Help:    "Time from a request's admission to the queue to its first generated token (queueing and prefill).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 17), // 1 ms .. 65 s
		}),
		tpot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kakeya_time_per_output_token_seconds",
			Help:    "Mean time between a request's generated tokens after the first.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms .. 4 s
		}),
	}
	m.reg.MustRegister(m.requests, m.promptTokens, m.generationTokens, m.ttft, m.tpot,
		&engineCollector{name: name, stats: stats, ratio: m.ratio})
	m.vllm = newVLLMMetrics(m.reg, name, stats)
	return m
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observe records a generation request that ran (res is its Result,
// possibly partial).
func (m *metrics) observe(res *kakeya.Result) { m.observeChoice(res, true) }

// observeChoice records one choice of a request; prompt says its prompt
// tokens count, which they do for one choice of n > 1 only, as usage
// counts them: the others found the prompt in the prefix cache.
func (m *metrics) observeChoice(res *kakeya.Result, prompt bool) {
	if prompt {
		m.promptTokens.Add(float64(res.PromptTokens))
		m.vllm.prompt.Add(float64(res.PromptTokens))
	}
	m.generationTokens.Add(float64(res.GeneratedTokens))
	m.vllm.observe(res)
	if res.GeneratedTokens > 0 {
		m.ttft.Observe(res.Prefill.Seconds())
	}
	if res.GeneratedTokens > 1 {
		m.tpot.Observe((res.Decode / time.Duration(res.GeneratedTokens-1)).Seconds())
	}
	if b := res.KV.Bytes(); b > 0 {
		m.mu.Lock()
		m.kvBytes += float64(b)
		m.kvBF16Bytes += float64(res.KV.BF16)
		m.mu.Unlock()
	}
}

// observeEmbed records an embeddings request's prompt tokens.
func (m *metrics) observeEmbed(tokens int) {
	m.promptTokens.Add(float64(tokens))
	m.vllm.prompt.Add(float64(tokens))
}

// ratio returns the compression ratio the requests ended so far achieved:
// the bytes a bf16 cache of their tokens would take over those their
// caches took, 0 before any.
func (m *metrics) ratio() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.kvBytes == 0 {
		return 0
	}
	return m.kvBF16Bytes / m.kvBytes
}

// engineCollector reports the engine's serving state as it is at each
// scrape, from one snapshot.
type engineCollector struct {
	name  string // the served model's, the vLLM gauges' model_name
	stats func() (scheduler.Stats, bool)
	ratio func() float64
}

var (
	descRunning = prometheus.NewDesc("vllm:num_requests_running",
		"Requests running: admitted to the KV block pool and batched at each step.", []string{"model_name"}, nil)
	descWaiting = prometheus.NewDesc("vllm:num_requests_waiting",
		"Requests queued for admission (KV memory or a running slot).", []string{"model_name"}, nil)
	descUsage = prometheus.NewDesc("vllm:kv_cache_usage_perc",
		"Fraction (0..1) of the KV memory budget the running requests have claimed.", []string{"model_name"}, nil)
	descUsed = prometheus.NewDesc("kakeya_kv_cache_used_bytes",
		"Bytes the KV block pool holds, by format (hot-f32, hot-bf16 or a codec's name), cached prefix blocks included.", []string{"format"}, nil)
	descBudget = prometheus.NewDesc("kakeya_kv_cache_budget_bytes",
		"The KV block pool's byte budget (--kv-memory).", nil, nil)
	descReserved = prometheus.NewDesc("kakeya_kv_cache_reserved_bytes",
		"Bytes of the budget the running requests have claimed, up to their next steps and a decode reserve.", nil, nil)
	descBlocks = prometheus.NewDesc("kakeya_kv_cache_blocks",
		"Shared KV blocks: referenced by a running sequence, or cached for prefix reuse and evictable.", []string{"state"}, nil)
	descQueries = prometheus.NewDesc("kakeya_prefix_cache_queries_total",
		"Admissions that looked for a cached prefix.", nil, nil)
	descHits = prometheus.NewDesc("kakeya_prefix_cache_hits_total",
		"Admissions that reused at least one cached block.", nil, nil)
	descHitTokens = prometheus.NewDesc("kakeya_prefix_cache_hit_tokens_total",
		"Prompt tokens served from cached blocks instead of being recomputed.", nil, nil)
	descEvictions = prometheus.NewDesc("kakeya_kv_cache_evictions_total",
		"Cached blocks evicted to make room.", nil, nil)
	descPreemptions = prometheus.NewDesc("kakeya_preemptions_total",
		"Running requests preempted for KV memory (recomputed later).", nil, nil)
	descSteps = prometheus.NewDesc("kakeya_steps_total",
		"Batched forward steps run.", nil, nil)
	descRatio = prometheus.NewDesc("kakeya_kv_cache_compression_ratio",
		"Achieved KV compression: the bytes a bf16 cache of the ended requests' tokens would take over those their caches took.", nil, nil)
)

// Describe sends every metric's description.
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descUsage, descUsed, descBudget, descReserved,
		descBlocks, descQueries, descHits, descHitTokens, descEvictions, descPreemptions, descSteps, descRatio} {
		ch <- d
	}
}

// Collect sends the metrics of one snapshot of the engine's state; none
// while the engine loads.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.stats()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(descRunning, float64(st.Running), c.name)
	gauge(descWaiting, float64(st.Waiting), c.name)
	usage := 0.0
	if st.Pool.Budget > 0 {
		usage = min(1, float64(st.Reserved)/float64(st.Pool.Budget))
	}
	gauge(descUsage, usage, c.name)
	for f, n := range st.Pool.ByFormat {
		gauge(descUsed, float64(n), f)
	}
	gauge(descBudget, float64(st.Pool.Budget))
	gauge(descReserved, float64(st.Reserved))
	gauge(descBlocks, float64(st.Pool.Referenced), "referenced")
	gauge(descBlocks, float64(st.Pool.Cached), "cached")
	counter(descQueries, st.Pool.Queries)
	counter(descHits, st.Pool.Hits)
	counter(descHitTokens, st.Pool.HitTokens)
	counter(descEvictions, st.Pool.Evictions)
	counter(descPreemptions, st.Preemptions)
	counter(descSteps, st.Steps)
	gauge(descRatio, c.ratio())
}
