// Command kakeya-serve serves a model over an OpenAI-compatible HTTP API:
// chat and text completions, plain or streamed as server-sent events,
// embeddings, with the Prometheus metrics an inference gateway routes by. Concurrent
// requests are batched by the engine's scheduler over one KV block pool.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/compute"
	"github.com/kakeya-ai/kakeya/internal/cli"
	"github.com/kakeya-ai/kakeya/internal/device"
	"github.com/kakeya-ai/kakeya/internal/kvflags"
	"github.com/kakeya-ai/kakeya/kvcache/kvconfig"
	"github.com/kakeya-ai/kakeya/scheduler"
	"github.com/kakeya-ai/kakeya/weights"
)

const name = "kakeya-serve"

func main() { os.Exit(mainStatus(os.Args[1:], os.Stdout, os.Stderr)) }

// mainStatus runs the server until it fails or a SIGINT or SIGTERM has
// drained it, and returns the exit status: 0 after a drain, 1 on an
// error, 2 on a bad command line. A second signal during the drain ends
// it at once, with 130 or 143.
func mainStatus(args []string, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, stdout, stderr) }()
	select {
	case err := <-done:
		return report(err, stderr)
	case <-sigs:
		cancel() // drain
	}
	select {
	case err := <-done:
		return report(err, stderr)
	case sig := <-sigs:
		fmt.Fprintf(stderr, "%s: interrupted during the drain\n", name)
		if sig == syscall.SIGTERM {
			return cli.ExitTerm
		}
		return cli.ExitInterrupt
	}
}

// report prints err, if any, as the tools do and returns the exit status
// for it.
func report(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	var u *cli.UsageError
	if errors.As(err, &u) {
		if u.Usage != nil {
			u.Usage()
		}
		return cli.ExitUsage
	}
	return cli.ExitError
}

type options struct {
	model, served, addr, apiKey string
	device, matmul, calib       string
	calibCache                  string
	logFormat                   string
	strictParams                bool
	pooling                     string
	threads, maxContext         int
	maxRunning, maxWaiting      int
	scheduling                  string // --scheduling
	maxConns                    int
	stepTokens                  int
	kvMemory, maxBody           cli.ByteSize
	promptMemory                cli.ByteSize
	timeout, drain, readTimeout time.Duration
	cache                       kvconfig.Spec
	backend                     compute.Backend // from --device
}

func parseFlags(args []string, stdout, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&o.model, "model", "", "model directory, Hugging Face id (ORG/NAME) or GGUF file")
	fs.StringVar(&o.served, "served-model-name", "", "the model id the API names and requests must use (default: --model as given)")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on, HOST:PORT (0.0.0.0:8080 for every interface)")
	fs.StringVar(&o.apiKey, "api-key", "", "require this key as Authorization: Bearer KEY on /v1/*, /tokenize and /detokenize (default: $KAKEYA_API_KEY, which keeps it out of the process list; none: no key)")
	fs.IntVar(&o.threads, "threads", 0, "worker threads (0 = all cores)")
	fs.IntVar(&o.maxContext, "ctx", 0, "context length in tokens (0 = the model's, at most 32768)")
	fs.StringVar(&o.device, "device", "cpu", "compute device: "+strings.Join(device.Names(), ", "))
	fs.StringVar(&o.matmul, "matmul", "", device.MatMulUsage+" (default: bf16 on the CPU)")
	fs.StringVar(&o.calib, "calib", "", "calibration file (kakeya-eval calibrate): keys are preconditioned by the model's query covariance, kakeya codecs use its codebooks and kakeya-pc its principal components (without it, the kakeya preset and any kakeya-pc or kvtc cache are calibrated automatically on the built-in text, once per model, and the file is kept in --calib-cache)")
	fs.StringVar(&o.calibCache, "calib-cache", "", "directory of the automatic calibrations a cache without --calib gets (the kakeya preset, kakeya-pc): reused per model, made once on the built-in text (default: the user cache directory's kakeya/calib)")
	fs.Var(&o.kvMemory, "kv-memory", cli.KVMemoryUsage)
	fs.IntVar(&o.maxRunning, "max-running", 0, fmt.Sprintf("requests batched at once at most (0 = %d)", scheduler.DefaultMaxRunning))
	fs.IntVar(&o.maxWaiting, "max-waiting", 0, fmt.Sprintf("requests queued for admission at most; more get 429 (0 = %d)", scheduler.DefaultMaxWaiting))
	fs.StringVar(&o.scheduling, "scheduling", "fcfs", "scheduling policy, as vLLM's --scheduling-policy: fcfs (first come, first served) or priority (a request's integer priority field, lower first, ties by arrival; preemption takes the lowest priority, latest first)")
	fs.IntVar(&o.stepTokens, "step-tokens", 0, fmt.Sprintf("tokens of one batched step at most, decode tokens and prompt chunks together (0 = %d)", scheduler.DefaultStepTokens))
	o.maxBody = 4 << 20
	fs.Var(&o.maxBody, "max-body", "the largest request body, in bytes with an optional K, M or G (binary) suffix; larger gets 413")
	fs.Var(&o.promptMemory, "max-prompt-memory", fmt.Sprintf("memory the prompts being read, tokenized, queued and run may take together, estimated from their bodies (%d bytes per byte while tokenized, then %d per byte and %d per token); past it a request gets 429, one that alone needs more 413 (0 = %d x --max-body)", tokenizeBytesPerByte, heldBytesPerByte, heldBytesPerToken, tokenizeBytesPerByte))
	fs.DurationVar(&o.timeout, "request-timeout", 10*time.Minute, "time limit of one request, e.g. 90s (0 = none); past it the request ends with 504")
	fs.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "time to receive a request's headers, and again its body, e.g. 10s (0 = none); a body slower than that gets 408 and the connection closes")
	fs.IntVar(&o.maxConns, "max-connections", 0, "HTTP connections open at once at most; one more is answered 503 and closed (0 = the file-descriptor limit less 64, at most 4096)")
	fs.DurationVar(&o.drain, "drain", 30*time.Second, "on SIGTERM or SIGINT, how long requests in flight may run before they are cancelled")
	fs.StringVar(&o.logFormat, "log-format", "text", "request log on stderr: text or json (log/slog)")
	fs.StringVar(&o.pooling, "pooling", "last", "how /v1/embeddings pools a text's final hidden states: last (the last token's, which has seen the whole text) or mean")
	fs.BoolVar(&o.strictParams, "strict-params", false, "answer a request field this server does not implement with a 400 unless it holds its neutral value (default: unknown fields, such as store or a message's name, are ignored and logged once each; fields that change the output, such as tools, are refused either way)")
	kvflags.Register(fs, &o.cache)
	if err := cli.Parse(fs, args, stdout, stderr, func(w io.Writer) {
		fmt.Fprintln(w, "usage: kakeya-serve --model DIR|HF_ID|FILE.gguf [--addr HOST:PORT] [flags]\n\nServes the OpenAI API (/v1/chat/completions, /v1/completions, /v1/embeddings,\n/v1/models), /health, /tokenize, /detokenize and /metrics.\n\nflags:")
		cli.PrintDefaults(fs, w)
	}); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if o.served == "" {
		o.served = o.model
	}
	if o.apiKey == "" {
		// Read here, not as the flag's default, which -h would print.
		o.apiKey = os.Getenv("KAKEYA_API_KEY")
	}
	return o, o.check()
}

// check rejects flags that are out of range or contradict each other,
// before anything loads.
func (o *options) check() error {
	switch {
	case o.model == "":
		return errors.New("--model is required")
	case o.threads < 0 || o.threads > device.MaxThreads():
		return fmt.Errorf("--threads %d: want 0 (all cores) to %d", o.threads, device.MaxThreads())
	case o.maxContext < 0:
		return fmt.Errorf("--ctx %d must be >= 0", o.maxContext)
	case o.scheduling != "fcfs" && o.scheduling != "priority":
		return fmt.Errorf("--scheduling %q, want fcfs or priority", o.scheduling)
	case o.maxRunning < 0 || o.maxWaiting < 0 || o.stepTokens < 0:
		return fmt.Errorf("--max-running %d, --max-waiting %d and --step-tokens %d must be >= 0 (0 for the default)", o.maxRunning, o.maxWaiting, o.stepTokens)
	case o.timeout < 0 || o.drain < 0 || o.readTimeout < 0:
		return fmt.Errorf("--request-timeout %v, --read-timeout %v and --drain %v must be >= 0", o.timeout, o.readTimeout, o.drain)
	case o.promptMemory < 0:
		return fmt.Errorf("--max-prompt-memory %d must be >= 0 (0 for the default)", int64(o.promptMemory))
	case o.maxConns < 0:
		return fmt.Errorf("--max-connections %d must be >= 0 (0 for the default)", o.maxConns)
	case o.logFormat != "text" && o.logFormat != "json":
		return fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	case o.pooling != "last" && o.pooling != "mean":
		return fmt.Errorf("--pooling %q: want last or mean", o.pooling)
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return fmt.Errorf("--addr %q: %w", o.addr, err)
	}
	if err := device.Check(o.device); err != nil {
		return err
	}
	if err := device.CheckMatMul(o.matmul); err != nil {
		return err
	}
	return kvflags.Check(o.cache, o.calib)
}

// engineOptions returns what kakeya.Load is given.
func (o *options) engineOptions(hub weights.HubOptions, log *slog.Logger) kakeya.Options {
	opt := kakeya.Options{
		Backend:          o.backend,
		MaxContext:       o.maxContext,
		Hub:              hub,
		Cache:            o.cache,
		Calibration:      o.calib,
		CalibrationCache: o.calibCache,
		KVMemory:         int64(o.kvMemory),
		Serving:          kakeya.ServingOptions{MaxRunning: o.maxRunning, MaxWaiting: o.maxWaiting, StepTokens: o.stepTokens, Scheduling: o.scheduling},
		Log:              log,
	}
	return opt
}

// run listens, loads the model (answering /health with 503 meanwhile) and
// serves until ctx is cancelled; then it drains: it stops accepting
// connections, lets the requests in flight run for --drain, cancels those
// left, and returns nil.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	defer func() { err = kvflags.Error(err) }()
	o, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	// The device opens before the listener, so that a missing GPU fails at
	// once; it closes after the engine, or when loading failed.
	if o.backend, err = device.Open(o.device, o.threads, o.matmul); err != nil {
		return err
	}
	// Closed on return, after the engine, unless a model still loading on
	// it takes it over (closeBackend false: see afterLoad).
	closeBackend := true
	defer func() {
		if closeBackend {
			o.backend.Close()
		}
	}()
	var h slog.Handler = slog.NewTextHandler(stderr, nil)
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(h)

	pooling, err := kakeya.ParsePooling(o.pooling)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	s := newServer(serverConfig{name: o.served, apiKey: o.apiKey, maxBody: int64(o.maxBody), promptMemory: int64(o.promptMemory), timeout: o.timeout, readTimeout: o.readTimeout, log: log})
	if o.maxConns == 0 {
		o.maxConns = defaultMaxConnections()
	}
	s.strictParams, s.pooling, s.scheduling = o.strictParams, pooling, o.scheduling
	ln = newLimitListener(ln, o.maxConns, s.metrics.reg)
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	hs := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: o.readTimeout,   // the body's: server.readBody
		IdleTimeout:       2 * time.Minute, // keep-alive connections left unused
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(h, slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "pid", os.Getpid(), "model", o.model, "served_model_name", o.served, "max_connections", o.maxConns)

	hub := weights.HubOptionsFromEnv()
	hub.Progress = stderr
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loaded := make(chan error, 1)
	var eng *kakeya.Engine
	go func() {
		start := time.Now()
		eo := o.engineOptions(hub, log)
		eo.CalibrationProgress = s.calibrationProgress
		e, err := kakeya.Load(loadCtx, o.model, eo)
		if err == nil {
			if w := e.CacheSettings().Warning; w != nil {
				log.Warn("KV cache: " + kvflags.Error(w).Error())
			}
			// Serving first, then the line that says so: a client
			// watching the log for "ready" must not get a 503.
			eng = e
			s.setEngine(e)
			// The load's outcome before "ready": a signal that comes
			// after a client saw "ready" finds it and drains (below).
			loaded <- nil
			log.Info("ready", "load", time.Since(start).Round(time.Millisecond), "kv_cache", e.CacheSettings().String(),
				"calibration", e.CalibrationInfo().String(), "max_tokens", e.MaxTokens(), "kernels", e.Kernels(), "weights", e.ModelInfo().Weights)
			return
		}
		loaded <- err
	}()

	// afterLoad hands the backend to the load still running: it closes
	// the engine, if one loaded, and then the backend.
	afterLoad := func() {
		closeBackend = false
		stopLoad()
		go func() {
			if <-loaded == nil {
				eng.Close()
			}
			o.backend.Close()
		}()
	}
	select {
	case err := <-loaded:
		if err != nil {
			hs.Close()
			return err
		}
	case err := <-served:
		afterLoad()
		return err
	case <-ctx.Done():
		// The load may have finished as the signal came (select picks at
		// random among ready cases; a busy machine can also leave this
		// goroutine waiting after "ready"): then the server is serving,
		// and drains.
		select {
		case err := <-loaded:
			if err != nil {
				hs.Close()
				return err
			}
			defer eng.Close()
			return drain(s, hs, cancelBase, o.drain, log)
		default:
		}
		// Stopped while loading: nothing runs yet.
		afterLoad()
		s.draining.Store(true)
		hs.Close()
		log.Info("stopped while loading the model")
		return nil
	}
	defer eng.Close()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	return drain(s, hs, cancelBase, o.drain, log)
}

// drain stops s: /health says 503, the listener closes, and the requests
// in flight get grace to end before their contexts are cancelled.
func drain(s *server, hs *http.Server, cancelRequests context.CancelFunc, grace time.Duration, log *slog.Logger) error {
	s.draining.Store(true)
	st := s.eng.Load().Stats()
	log.Info("draining", "running", st.Running, "waiting", st.Waiting, "grace", grace)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(ctx); err == nil {
		log.Info("drained")
		return nil
	}
	// Past the grace: cancel what still runs, each ends at the next step
	// and its handler answers; give them a moment, then close.
	s.aborting.Store(true)
	cancelRequests()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := hs.Shutdown(ctx2); err != nil {
		hs.Close()
	}
	log.Info("drained after cancelling the requests still running past the grace", "grace", grace)
	return nil
}
