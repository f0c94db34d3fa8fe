package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/scheduler"
)

// vllmMetrics are the request metrics of vLLM's /metrics under its names,
// each with the model_name label, so that dashboards and alerts written
// for vLLM read this server: beside the kakeya_* metrics, which stay.
type vllmMetrics struct {
	ttft, itl, tpot, e2e prometheus.Observer
	prompt, generation   prometheus.Counter
}

// vLLM's buckets (vllm/v1/metrics/loggers.py), so that quantiles compare.
var (
	vllmTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	vllmITLBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	vllmE2EBuckets  = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}
)

// newVLLMMetrics registers the vLLM-named metrics of the served model
// name in reg; stats reads the engine's state at each scrape (false while
// it loads).
func newVLLMMetrics(reg *prometheus.Registry, name string, stats func() (scheduler.Stats, bool)) *vllmMetrics {
	hist := func(metric, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metric, Help: help, Buckets: buckets}, []string{"model_name"})
		reg.MustRegister(h)
		return h.WithLabelValues(name)
	}
	counter := func(metric, help string) prometheus.Counter {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metric, Help: help}, []string{"model_name"})
		reg.MustRegister(c)
		return c.WithLabelValues(name)
	}
	const itlHelp = "Time between consecutive generated tokens of a request, each interval counted at its request's mean (the engine times the decode whole)."
	v := &vllmMetrics{
		ttft:       hist("vllm:time_to_first_token_seconds", "Time from a request's arrival at the engine to its first generated token (queueing and prefill).", vllmTTFTBuckets),
		itl:        hist("vllm:inter_token_latency_seconds", itlHelp, vllmITLBuckets),
		tpot:       hist("vllm:time_per_output_token_seconds", itlHelp+" vLLM's older name of vllm:inter_token_latency_seconds.", vllmITLBuckets),
		e2e:        hist("vllm:e2e_request_latency_seconds", "Time from a request's arrival at the engine to its last token.", vllmE2EBuckets),
		prompt:     counter("vllm:prompt_tokens_total", "Prompt tokens of the generation requests that ran."),
		generation: counter("vllm:generation_tokens_total", "Tokens generated."),
	}
	reg.MustRegister(&vllmCollector{name: name, stats: stats})
	return v
}

// observe records a generation that ran (res is its Result, possibly
// partial), but for its prompt tokens, which the caller counts once per
// request (metrics.observeChoice).
func (v *vllmMetrics) observe(res *kakeya.Result) {
	v.generation.Add(float64(res.GeneratedTokens))
	if res.GeneratedTokens == 0 {
		return
	}
	v.ttft.Observe(res.Prefill.Seconds())
	v.e2e.Observe((res.Prefill + res.Decode).Seconds())
	if n := res.GeneratedTokens - 1; n > 0 {
		itl := (res.Decode / time.Duration(n)).Seconds()
		for range n {
			v.itl.Observe(itl)
			v.tpot.Observe(itl)
		}
	}
}

// vllmCollector reports the engine's counters under vLLM's names at each
// scrape, from one snapshot.
type vllmCollector struct {
	name  string
	stats func() (scheduler.Stats, bool)
}

var (
	descVLLMPreemptions = prometheus.NewDesc("vllm:num_preemptions_total",
		"Running requests preempted for KV memory (recomputed later).", []string{"model_name"}, nil)
	descVLLMQueries = prometheus.NewDesc("vllm:prefix_cache_queries_total",
		"Prompt tokens looked up in the prefix cache, as vLLM counts its queries: in tokens.", []string{"model_name"}, nil)
	descVLLMHits = prometheus.NewDesc("vllm:prefix_cache_hits_total",
		"Prompt tokens found in the prefix cache (reused instead of recomputed).", []string{"model_name"}, nil)
)

// Describe sends every metric's description.
func (c *vllmCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descVLLMPreemptions
	ch <- descVLLMQueries
	ch <- descVLLMHits
}

// Collect sends the counters; zeros while the engine loads, so that the
// series exist from the first scrape, as vLLM's do.
func (c *vllmCollector) Collect(ch chan<- prometheus.Metric) {
	st, _ := c.stats()
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), c.name)
	}
	counter(descVLLMPreemptions, st.Preemptions)
	counter(descVLLMQueries, st.Pool.QueryTokens)
	counter(descVLLMHits, st.Pool.HitTokens)
}
