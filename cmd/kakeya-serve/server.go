package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/kakeya-ai/kakeya"
	"github.com/kakeya-ai/kakeya/model"
	"github.com/kakeya-ai/kakeya/scheduler"
)

// A server serves one engine over the OpenAI API. It answers /health and
// /metrics from the start, and everything else with 503 until setEngine.
type server struct {
	name    string // the served model's id
	apiKey  string // "" for none
	maxBody int64  // bytes of a request body at most
	// scheduling is --scheduling: fcfs, or priority (requests' priority
	// field orders them).
	scheduling string
	timeout    time.Duration // of one request, 0 for none
	// readTimeout bounds the wait for a request's body, 0 for none.
	readTimeout time.Duration
	log         *slog.Logger
	metrics     *metrics
	prompts     *promptMemory // what the requests' prompts take, against --max-prompt-memory
	created     int64         // Unix time the server started, /v1/models's created

	eng      atomic.Pointer[kakeya.Engine]
	calib    atomic.Pointer[[2]int] // tokens done and in all of the calibration Load runs, nil before any
	draining atomic.Bool
	aborting atomic.Bool // the drain's grace ran out: requests are being cancelled

	// strictParams (--strict-params) refuses the fields it does not
	// implement (see params); ignored logs those it ignores.
	strictParams bool
	ignored      fieldLog
	pooling      kakeya.Pooling // --pooling, of /v1/embeddings
	embedSlot    chan struct{}  // held by the /v1/embeddings request running

	// generateIDs runs a generation: Engine.GenerateIDs, which tests
	// replace to script the model's reply.
	generateIDs func(eng *kakeya.Engine, ctx context.Context, ids []int, opt kakeya.GenerateOptions, onText func(string) error) (*kakeya.Result, error)
}

// serverConfig sets up a server.
type serverConfig struct {
	name, apiKey string
	maxBody      int64
	promptMemory int64 // --max-prompt-memory, 0 for its default
	timeout      time.Duration
	readTimeout  time.Duration
	log          *slog.Logger
}

func newServer(cfg serverConfig) *server {
	s := &server{name: cfg.name, scheduling: "fcfs", apiKey: cfg.apiKey, maxBody: cfg.maxBody, timeout: cfg.timeout, readTimeout: cfg.readTimeout, log: cfg.log, created: time.Now().Unix(),
		embedSlot: make(chan struct{}, 1), generateIDs: (*kakeya.Engine).GenerateIDs}
	s.metrics = newMetrics(cfg.name, func() (scheduler.Stats, bool) {
		if e := s.eng.Load(); e != nil {
			return e.Stats(), true
		}
		return scheduler.Stats{}, false
	})
	if cfg.promptMemory <= 0 {
		cfg.promptMemory = defaultPromptMemory(cfg.maxBody)
	}
	s.prompts = newPromptMemory(cfg.promptMemory, s.metrics.reg)
	return s
}

// setEngine makes the server ready to serve e.
func (s *server) setEngine(e *kakeya.Engine) { s.eng.Store(e) }

// handler returns the server's routes, each behind the logging and, for
// the API, the key check.
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	api := func(path, method string, h http.HandlerFunc) {
		mux.Handle(path, s.logged(path, s.authorized(allow(method, h))))
	}
	api("/v1/chat/completions", http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	api("/v1/completions", http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	api("/v1/embeddings", http.MethodPost, s.embeddings)
	api("/v1/models", http.MethodGet, s.models)
	api("/tokenize", http.MethodPost, s.tokenize)
	api("/detokenize", http.MethodPost, s.detokenize)
	mux.Handle("/health", s.logged("/health", allow(http.MethodGet, s.health)))
	mux.Handle("/metrics", s.logged("/metrics", allow(http.MethodGet, s.metrics.handler().ServeHTTP)))
	mux.Handle("/", s.logged("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path), typ: "invalid_request_error", code: "not_found"})
	})))
	return mux
}

// allow serves method (and HEAD where method is GET: the same answer
// without its body) through h, answers OPTIONS with 204 and the methods
// the path takes, and any other method with a 405 naming them.
func allow(method string, h http.HandlerFunc) http.HandlerFunc {
	methods := method + ", OPTIONS"
	if method == http.MethodGet {
		methods = "GET, HEAD, OPTIONS"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == method || r.Method == http.MethodHead && method == http.MethodGet:
			h(w, r)
		case r.Method == http.MethodOptions:
			w.Header().Set("Allow", methods)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Allow", methods)
			writeError(w, &apiError{status: http.StatusMethodNotAllowed, message: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, method, r.Method), typ: "invalid_request_error"})
		}
	}
}

// authorized requires the API key, when the server has one, as a Bearer
// token; the scheme's name is case-insensitive (RFC 9110, 11.1).
func (s *server) authorized(h http.Handler) http.Handler {
	if s.apiKey == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		key = strings.TrimLeft(key, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(key), []byte(s.apiKey)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kakeya-serve"`)
			writeError(w, &apiError{status: http.StatusUnauthorized, message: "missing or incorrect API key: send it as Authorization: Bearer KEY", typ: "invalid_request_error", code: "invalid_api_key"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// A reqInfo is what a handler tells the request's log line beyond the
// status: the tokens and timings of a generation.
type reqInfo struct {
	id                string
	prompt, generated int
	ttft              time.Duration
	status            int           // overrides the written status: 499 when the client went away
	charge            *promptCharge // the body's share of the prompt memory, released as the request ends
}

type reqInfoKey struct{}

// info returns the request's reqInfo, which logged put in its context.
func info(r *http.Request) *reqInfo {
	if ri, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{}
}

// logged writes one log line per request (health checks and scrapes at
// debug level) and counts it in kakeya_requests_total.
func (s *server) logged(endpoint string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if s.readTimeout > 0 {
			// The body's deadline (net/http's ReadHeaderTimeout covers
			// the headers only): readBody lifts it once the body is in;
			// a handler that reads none leaves it for the server's
			// reading what is left of the body.
			http.NewResponseController(w).SetReadDeadline(start.Add(s.readTimeout))
		}
		ri := &reqInfo{}
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, ri)))
		ri.charge.release()
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		if ri.status != 0 {
			status = ri.status
		}
		s.metrics.requests.WithLabelValues(endpoint, fmt.Sprint(status)).Inc()
		level := slog.LevelInfo
		if endpoint == "/health" || endpoint == "/metrics" {
			level = slog.LevelDebug
		}
		attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status)}
		if ri.id != "" {
			attrs = append(attrs, slog.String("id", ri.id), slog.Int("prompt_tokens", ri.prompt), slog.Int("generated_tokens", ri.generated),
				slog.Duration("ttft", ri.ttft))
		}
		attrs = append(attrs, slog.Duration("duration", time.Since(start)), slog.String("remote", r.RemoteAddr))
		s.log.LogAttrs(r.Context(), level, "request", attrs...)
	})
}

// statusWriter records the status a handler writes; Unwrap lets
// http.ResponseController flush through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeError sends e as the OpenAI API does.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.status, e)
}

// writeJSON sends v as a JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// ready returns the engine, or the 503 of a server still loading or
// draining.
func (s *server) ready() (*kakeya.Engine, *apiError) {
	e := s.eng.Load()
	switch {
	case s.draining.Load():
		return nil, &apiError{status: http.StatusServiceUnavailable, message: "the server is shutting down", typ: "server_error", code: "unavailable"}
	case e == nil:
		return nil, &apiError{status: http.StatusServiceUnavailable, message: "the model is loading", typ: "server_error", code: "unavailable"}
	}
	return e, nil
}

// readBody reads the request body, at most s.maxBody bytes, within the
// s.readTimeout that logged set (a client sending it slower gets 408, and
// its connection closes); the deadline is lifted once the body is in, for
// the response may take longer.
//
// Before it reads, the body is charged to the prompt memory (by its
// Content-Length, or --max-body when the length is not given): a request
// that does not fit is answered 429 (413 when it never could) with its
// body unread. The charge, info(r).charge, lasts until the request ends:
// tokenize raises it to tokenize the prompt, and lowers it after.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	size := s.maxBody
	if r.ContentLength >= 0 {
		if r.ContentLength > s.maxBody {
			return nil, bodyTooLarge(s.maxBody)
		}
		size = r.ContentLength
	}
	charge, aerr := s.prompts.charge(size)
	if aerr != nil {
		w.Header().Set("Connection", "close") // the body is left unread
		return nil, aerr
	}
	info(r).charge = charge
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	charge.resize(int64(len(b)) * readBytesPerByte)
	if s.readTimeout > 0 && err == nil {
		http.NewResponseController(w).SetReadDeadline(time.Time{})
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.Header().Set("Connection", "close")
		return nil, &apiError{status: http.StatusRequestTimeout, message: fmt.Sprintf("the request body did not arrive within %v (--read-timeout)", s.readTimeout), typ: "invalid_request_error", code: "timeout"}
	}
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, bodyTooLarge(mb.Limit)
		}
		return nil, badRequest("", "reading the request body: %v", err)
	}
	return b, nil
}

// bodyTooLarge is the 413 of a body over --max-body.
func bodyTooLarge(limit int64) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("the request body is over the limit of %d bytes", limit), typ: "invalid_request_error", code: "request_too_large"}
}

// checkModel answers a request for another model than the served one with
// a 404; an empty model means the served one.
func (s *server) checkModel(name string) *apiError {
	if name != "" && name != s.name {
		return &apiError{status: http.StatusNotFound, message: fmt.Sprintf("the model %q does not exist: this server serves %q", name, s.name), typ: "invalid_request_error", param: "model", code: "model_not_found"}
	}
	return nil
}

// usage is the token counts of a response.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usageOf(res *kakeya.Result) *usage {
	return &usage{res.PromptTokens, res.GeneratedTokens, res.PromptTokens + res.GeneratedTokens}
}

// finishReason maps a StopReason to the API's finish_reason.
func finishReason(stop string) string {
	if stop == kakeya.StopLength || stop == kakeya.StopContext {
		return "length"
	}
	return "stop"
}

// begin starts a handler that reads a body: the engine and the body, or
// false once the 503 of a server not ready (or the body's error) was
// written.
func (s *server) begin(w http.ResponseWriter, r *http.Request) (*kakeya.Engine, []byte, bool) {
	eng, aerr := s.ready()
	var body []byte
	if aerr == nil {
		body, aerr = s.readBody(w, r)
	}
	if aerr != nil {
		writeError(w, aerr)
		return nil, nil, false
	}
	return eng, body, true
}

// generate serves /v1/chat/completions (chat) and /v1/completions.
func (s *server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	eng, body, ok := s.begin(w, r)
	if !ok {
		return
	}
	p := &params{strict: s.strictParams}
	req, aerr := decodeRequest(body, chat, p)
	s.ignored.note(s.log, r.URL.Path, p.ignored)
	if aerr == nil {
		aerr = s.checkModel(req.model)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if req.priority != 0 && s.scheduling != "priority" {
		writeError(w, badRequest("priority", "priority %d needs the priority scheduling policy (kakeya-serve --scheduling priority); this server schedules %s", req.priority, s.scheduling))
		return
	}
	opt := kakeya.GenerateOptions{MaxTokens: req.maxTokens, Sampling: req.sampling, Stop: req.stop, IgnoreEOS: req.ignoreEOS,
		Logprobs: req.logprobs, TopLogprobs: req.topLogprobs, Priority: req.priority}
	req.constraint.apply(&opt)
	if !req.seeded {
		opt.Sampling.Seed = rand.Uint64()
	}
	prompt := req.prompt
	var plan *toolPlan
	if chat {
		opt.Chat, opt.Messages, opt.ChatTemplateKwargs, prompt = true, req.messages, req.chatKwargs, ""
		plan = planTools(eng.ToolTemplate(), req, &opt)
	}
	// What cannot fit the context is turned away on its bytes, before
	// the prompt memory is asked for the tokenizer's share.
	err := eng.CheckPrompt(prompt, opt)
	if err == nil {
		if aerr := info(r).charge.grow(int64(len(body)), tokenizeBytesPerByte); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	var ids []int
	if err == nil {
		ids, err = eng.PromptIDs(prompt, opt)
	}
	if err == nil && plan != nil && plan.prefix != "" {
		// tool_choice required or named: the reply starts with a call.
		ids = append(ids, eng.Encode(plan.prefix, false)...)
	}
	if err != nil {
		writeError(w, s.publicError(r, eng, generateError(err, false)))
		return
	}
	// Tokenized: the request keeps its text and ids until it ends.
	info(r).charge.resize(int64(len(body))*heldBytesPerByte + int64(len(ids))*heldBytesPerToken)
	if aerr := checkLength(len(ids), req.maxTokens, eng.MaxTokens(), chat); aerr != nil {
		writeError(w, aerr)
		return
	}

	ri := info(r)
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	ri.id = fmt.Sprintf("%s%016x", prefix, rand.Uint64())
	w.Header().Set("X-Request-Id", ri.id)
	ctx := r.Context()
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	out := &response{id: ri.id, model: s.name, created: time.Now().Unix(), chat: chat, logprobs: req.logprobs, tools: plan}
	gen := s.generateIDs
	if req.echo {
		if out.echo, err = echoPrompt(ctx, eng, req, ids); err != nil {
			writeError(w, s.publicError(r, eng, generateError(err, false)))
			return
		}
		if req.scoreOnly {
			gen = scoreOnly
		}
	}
	if req.n > 1 {
		s.generateN(ctx, w, r, eng, req, ids, opt, out, gen)
		return
	}
	var res *kakeya.Result
	if req.stream {
		sse := &sseWriter{w: w, rc: http.NewResponseController(w), resp: out}
		sse.sendEcho()
		if req.logprobs {
			opt.OnToken = sse.token
		}
		onText := sse.text
		if plan != nil && plan.parse {
			sse.tools = newToolStream(sse, plan)
			onText = sse.tools.text
		}
		res, err = gen(eng, ctx, ids, opt, onText)
		s.finishStream(r, eng, sse, req, res, err)
	} else {
		res, err = gen(eng, ctx, ids, opt, nil)
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, out.whole(res))
		case s.gone(r):
			// The connection may be only half-closed, the client still
			// reading: it is told why there is no completion.
			writeError(w, errClientGone)
		default:
			writeError(w, s.publicError(r, eng, generateError(err, res != nil)))
		}
	}
	if res != nil {
		s.metrics.observe(res)
		ri.prompt, ri.generated = res.PromptTokens, res.GeneratedTokens
		if res.GeneratedTokens > 0 {
			ri.ttft = res.Prefill
		}
	}
}

// errClientGone answers a request whose client closed the connection, or
// only its sending side (a half-close, which net/http cannot tell from a
// close), before the response: the request was cancelled. Its status is
// nginx's 499, as the log line says.
var errClientGone = &apiError{status: 499, message: "the client closed the connection (or its sending side) before the response, which cancels the request: keep it open until the response ends", typ: "invalid_request_error", code: "client_closed_request"}

// publicError returns e fit for the client: a 500's message becomes a
// pointer to the log, where the error goes whole, and the model's
// directory (a path on the server) is named by the served model's id.
func (s *server) publicError(r *http.Request, eng *kakeya.Engine, e *apiError) *apiError {
	if e.status == http.StatusInternalServerError {
		s.log.Error("request failed", "id", info(r).id, "error", e.message)
		c := *e
		c.message = "the server failed on this request; its log has the details"
		if id := info(r).id; id != "" {
			c.message += " (request " + id + ")"
		}
		return &c
	}
	if dir := eng.Dir(); dir != "" && strings.Contains(e.message, dir) {
		c := *e
		c.message = strings.ReplaceAll(e.message, dir, fmt.Sprintf("the model %q", s.name))
		return &c
	}
	return e
}

// gone reports whether the client went away, and marks the request's log
// line with 499 (nginx's "client closed request") if so. A request the
// drain cancelled is not gone: its client is told.
func (s *server) gone(r *http.Request) bool {
	if r.Context().Err() == nil || s.aborting.Load() {
		return false
	}
	info(r).status = 499
	return true
}

// checkLength answers a prompt that leaves no room in maxTotal tokens (the
// context, or what the KV memory holds), or a max_tokens beyond it, with
// a 400; chat says the prompt came as messages.
func checkLength(prompt, maxTokens, maxTotal int, chat bool) *apiError {
	field := "prompt"
	if chat {
		field = "messages"
	}
	switch {
	case prompt == 0:
		return badRequest(field, "the prompt is empty (no tokens)")
	case prompt >= maxTotal:
		e := badRequest(field, "the prompt is %d tokens; this server holds %d tokens per request, prompt and completion together: shorten the prompt", prompt, maxTotal)
		e.code = "context_length_exceeded"
		return e
	case maxTokens > maxTotal-prompt:
		e := badRequest("max_tokens", "max_tokens is %d, but the prompt is %d tokens and this server holds %d tokens per request: at most %d", maxTokens, prompt, maxTotal, maxTotal-prompt)
		e.code = "context_length_exceeded"
		return e
	}
	return nil
}

// generateError maps an error of Engine.Generate (or PromptIDs) to the
// API's; ran says the model had started on the request.
func generateError(err error, ran bool) *apiError {
	var ce *model.ContextError
	switch {
	case errors.Is(err, scheduler.ErrQueueFull):
		return &apiError{status: http.StatusTooManyRequests, message: "the server's queue is full: retry later", typ: "rate_limit_error", code: "queue_full"}
	case errors.Is(err, kakeya.ErrClosed) || errors.Is(err, context.Canceled):
		// context.Canceled reaches a client only from the drain.
		return &apiError{status: http.StatusServiceUnavailable, message: "the server is shutting down", typ: "server_error", code: "unavailable"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, message: "the request ran past the server's time limit (--request-timeout)", typ: "server_error", code: "timeout"}
	case errors.As(err, &ce) || strings.Contains(err.Error(), "KV memory"):
		return &apiError{status: http.StatusBadRequest, message: err.Error(), typ: "invalid_request_error", code: "context_length_exceeded"}
	case !ran:
		return badRequest("", "%v", err)
	}
	return &apiError{status: http.StatusInternalServerError, message: err.Error(), typ: "server_error"}
}

// A response builds the JSON of one completion, whole or in chunks.
type response struct {
	id, model string
	created   int64
	chat      bool
	logprobs  bool      // the request asked for logprobs
	offset    int       // completions' text_offset of the next token
	tools     *toolPlan // the reply's tool calls, nil without tools
	index     int       // the choice's index, of n
	// echo is the prompt an echoing completion starts with, echoLogprobs
	// its tokens' (with logprobs); firstNull makes logprobsOf report the
	// next token's logprob as null, as the prompt's first token's.
	echo      *echoed
	firstNull bool
}

type chatMessage struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content"` // null beside tool calls
	ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
}

type choice struct {
	Index        int          `json:"index"`
	Message      *chatMessage `json:"message,omitempty"` // chat, whole
	Delta        *chatMessage `json:"delta,omitempty"`   // chat, chunk
	Text         *string      `json:"text,omitempty"`    // completions
	Logprobs     any          `json:"logprobs"`          // *chatLogprobs, *textLogprobs or null
	FinishReason *string      `json:"finish_reason"`
}

type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

// whole returns the non-streamed response for res.
func (o *response) whole(res *kakeya.Result) *completion {
	fr := finishReason(res.StopReason)
	c := choice{Index: o.index, FinishReason: &fr}
	obj := "text_completion"
	if o.chat {
		obj = "chat.completion"
		c.Message = &chatMessage{Role: "assistant"}
		c.Message.Content, c.Message.ToolCalls, fr = o.tools.reply(res.Text, fr)
	} else {
		c.Text = &res.Text
	}
	toks := res.Logprobs
	if o.echo != nil {
		text := o.echo.text + res.Text
		c.Text = &text
		if o.logprobs {
			toks = append(slices.Clip(o.echo.logprobs), toks...)
			o.firstNull = true
		}
	}
	c.Logprobs = o.logprobsOf(toks)
	return &completion{ID: o.id, Object: obj, Created: o.created, Model: o.model, Choices: []choice{c}, Usage: usageOf(res)}
}

// chunk returns a streamed chunk with text, the logprobs of toks if the
// request asked for them and, if not "", finish_reason; the first chat
// chunk carries the role.
func (o *response) chunk(text, finish string, first bool, toks []kakeya.TokenInfo) *completion {
	c := choice{Index: o.index, Logprobs: o.logprobsOf(toks)}
	if finish != "" {
		c.FinishReason = &finish
	}
	obj := "text_completion"
	if o.chat {
		obj = "chat.completion.chunk"
		c.Delta = &chatMessage{Content: &text}
		if first {
			c.Delta.Role = "assistant"
		}
	} else {
		c.Text = &text
	}
	return &completion{ID: o.id, Object: obj, Created: o.created, Model: o.model, Choices: []choice{c}}
}

// chatLogprobs is a chat choice's logprobs.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal []chatTokenLogprob `json:"refusal"` // always null: no refusals here
}

// chatTokenLogprob is one token of chatLogprobs.Content.
type chatTokenLogprob struct {
	chatTopLogprob
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

// chatTopLogprob is a token with its logprob and its text's UTF-8 bytes.
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// textLogprobs is a completions choice's logprobs: parallel lists, one
// entry per token.
type textLogprobs struct {
	Tokens        []string   `json:"tokens"`
	TokenLogprobs []*float32 `json:"token_logprobs"` // null for an echoed prompt's first token
	// TopLogprobs maps the text of the most likely tokens, and of the
	// sampled one, to their logprobs (up to logprobs+1 entries, fewer
	// where two tokens have the same text).
	TopLogprobs []map[string]float32 `json:"top_logprobs"`
	// TextOffset is where each token's text starts in the completion's
	// text, in Unicode characters as Python counts them (as vLLM).
	TextOffset []int `json:"text_offset"`
}

// logprobsOf returns the logprobs of toks in the endpoint's shape, or nil
// (null) when the request did not ask for them or toks is empty. It
// advances the completions' text offset past toks.
func (o *response) logprobsOf(toks []kakeya.TokenInfo) any {
	if !o.logprobs || len(toks) == 0 {
		return nil
	}
	if o.chat {
		lp := &chatLogprobs{Content: make([]chatTokenLogprob, len(toks))}
		for i, t := range toks {
			top := make([]chatTopLogprob, len(t.Top))
			for j, a := range t.Top {
				top[j] = chatTopLogprob{a.Text, a.Logprob, utf8Bytes(a.Text)}
			}
			lp.Content[i] = chatTokenLogprob{chatTopLogprob{t.Text, t.Logprob, utf8Bytes(t.Text)}, top}
		}
		return lp
	}
	lp := &textLogprobs{
		Tokens: make([]string, len(toks)), TokenLogprobs: make([]*float32, len(toks)),
		TopLogprobs: make([]map[string]float32, len(toks)), TextOffset: make([]int, len(toks)),
	}
	for i, t := range toks {
		lp.Tokens[i], lp.TokenLogprobs[i], lp.TextOffset[i] = t.Text, &t.Logprob, o.offset
		o.offset += utf8.RuneCountInString(t.Text)
		if o.firstNull {
			// An echoed prompt's first token: nothing scored it.
			o.firstNull, lp.TokenLogprobs[i] = false, nil
			continue
		}
		top := map[string]float32{t.Text: t.Logprob}
		for _, a := range t.Top {
			if _, ok := top[a.Text]; !ok {
				top[a.Text] = a.Logprob
			}
		}
		lp.TopLogprobs[i] = top
	}
	return lp
}

// utf8Bytes returns the bytes of s as the API lists them, numbers.
func utf8Bytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// An sseWriter streams a completion as server-sent events. It sends the
// headers with the first event, so that an error before any text (a full
// queue, a bad prompt) still gets its own status.
//
// With logprobs, each chunk carries the tokens generated since the chunk
// before it, so a chunk's tokens are those whose text it completes. Text
// held back (an incomplete UTF-8 character, what may start a stop string)
// goes out with a later token's chunk, and the tokens it was held with go
// with it; the tokens of a stop string, whose text never goes out, ride on
// the last chunk, with finish_reason. Every generated token is reported
// once, as usage.completion_tokens counts them.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	resp    *response
	started bool
	buf     bytes.Buffer
	pending []kakeya.TokenInfo // tokens not yet sent, with logprobs
	tools   *toolStream        // the reply's tool calls, nil without tools
}

// token is Generate's OnToken: it keeps the token for the next chunk.
func (s *sseWriter) token(t kakeya.TokenInfo) error {
	s.pending = append(s.pending, t)
	return nil
}

// text is Generate's onText: one chunk per piece of text, with the tokens
// that came since the last chunk.
func (s *sseWriter) text(t string) error {
	c := s.resp.chunk(t, "", !s.started, s.pending)
	s.pending = s.pending[:0]
	return s.event(c)
}

// event sends v as one "data:" event and flushes it.
func (s *sseWriter) event(v any) error {
	if !s.started {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	s.buf.Reset()
	s.buf.WriteString("data: ")
	if raw, ok := v.(string); ok {
		s.buf.WriteString(raw)
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		s.buf.Write(b)
	}
	s.buf.WriteString("\n\n")
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		return err
	}
	return s.rc.Flush()
}

// finishStream ends a stream: the last chunk with finish_reason, the
// usage chunk if asked for, and [DONE]; or the error, as a status before
// any event or as an error event after.
func (s *server) finishStream(r *http.Request, eng *kakeya.Engine, sse *sseWriter, req *request, res *kakeya.Result, err error) {
	if err != nil {
		if s.gone(r) {
			if !sse.started {
				writeError(sse.w, errClientGone)
			}
			return
		}
		aerr := s.publicError(r, eng, generateError(err, res != nil))
		if !sse.started {
			writeError(sse.w, aerr)
			return
		}
		if sse.event(aerr) == nil {
			sse.event("[DONE]")
		}
		return
	}
	fr := finishReason(res.StopReason)
	if sse.tools != nil {
		if fr, err = sse.tools.finish(fr); err != nil {
			return
		}
	}
	if sse.event(sse.resp.chunk("", fr, !sse.started, sse.pending)) != nil {
		return
	}
	if req.includeUsage {
		c := &completion{ID: sse.resp.id, Object: "chat.completion.chunk", Created: sse.resp.created, Model: sse.resp.model, Choices: []choice{}, Usage: usageOf(res)}
		if !sse.resp.chat {
			c.Object = "text_completion"
		}
		if sse.event(c) != nil {
			return
		}
	}
	sse.event("[DONE]")
}

// models serves /v1/models: the one model served.
func (s *server) models(w http.ResponseWriter, r *http.Request) {
	eng, aerr := s.ready()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	type entry struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		MaxModelLen int    `json:"max_model_len"`
	}
	writeJSON(w, http.StatusOK, struct {
		Object string  `json:"object"`
		Data   []entry `json:"data"`
	}{"list", []entry{{s.name, "model", s.created, "kakeya", eng.MaxTokens()}}})
}

// decodeStrict decodes body into v, rejecting unknown fields.
func decodeStrict(body []byte, v any) *apiError {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest(te.Field, "%s must be %s, got a JSON %s", te.Field, typeName(te.Type.String()), te.Value)
		}
		return badRequest("", "the request body: %v", err)
	}
	if d.More() {
		return badRequest("", "the request body holds more than one JSON value")
	}
	return nil
}

// beginDecoded starts a request whose body is one JSON object: it is
// decoded strictly into v, and the model *model names (a field of v) is
// checked. It reports false when it has written the error response.
func (s *server) beginDecoded(w http.ResponseWriter, r *http.Request, v any, model *string) (*kakeya.Engine, bool) {
	eng, body, ok := s.begin(w, r)
	if !ok {
		return nil, false
	}
	aerr := decodeStrict(body, v)
	if aerr == nil {
		aerr = s.checkModel(*model)
	}
	if aerr != nil {
		writeError(w, aerr)
		return nil, false
	}
	return eng, true
}

// tokenize serves /tokenize, as vLLM does: the token ids of a prompt
// (with the model's special tokens unless add_special_tokens is false) or
// of chat messages through the chat template.
func (s *server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model            string          `json:"model"`
		Prompt           *string         `json:"prompt"`
		Messages         json.RawMessage `json:"messages"`
		Tools            json.RawMessage `json:"tools"`
		AddSpecialTokens *bool           `json:"add_special_tokens"`
	}
	eng, ok := s.beginDecoded(w, r, &req, &req.Model)
	if !ok {
		return
	}
	var ids []int
	switch {
	case req.Prompt != nil && req.Messages != nil:
		writeError(w, badRequest("messages", "send prompt or messages, not both"))
		return
	case req.Prompt != nil:
		if aerr := info(r).charge.grow(int64(len(*req.Prompt)), tokenizeBytesPerByte); aerr != nil {
			writeError(w, aerr)
			return
		}
		ids = eng.Encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	case req.Messages != nil:
		p := &params{strict: s.strictParams}
		msgs, aerr := decodeMessages(req.Messages, p)
		s.ignored.note(s.log, r.URL.Path, p.ignored)
		if aerr == nil && len(msgs) == 0 {
			aerr = badRequest("messages", "messages must hold at least one message")
		}
		creq := &request{chat: true, messages: msgs}
		if aerr == nil && req.Tools != nil && !isNull(req.Tools) {
			creq.tools, creq.toolFns, aerr = decodeTools(req.Tools)
		}
		if aerr == nil {
			aerr = info(r).charge.grow(int64(len(req.Messages)), tokenizeBytesPerByte)
		}
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		var err error
		// As a chat request renders them (tools, tool messages).
		opt := kakeya.GenerateOptions{Chat: true, Messages: msgs}
		planTools(eng.ToolTemplate(), creq, &opt)
		if ids, err = eng.PromptIDs("", opt); err != nil {
			writeError(w, s.publicError(r, eng, badRequest("messages", "%v", err)))
			return
		}
	default:
		writeError(w, badRequest("prompt", "prompt or messages is required"))
		return
	}
	if ids == nil {
		ids = []int{}
	}
	writeJSON(w, http.StatusOK, struct {
		Count       int   `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
	}{len(ids), eng.MaxTokens(), ids})
}

// detokenize serves /detokenize: the text of token ids.
func (s *server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Tokens []int  `json:"tokens"`
	}
	eng, ok := s.beginDecoded(w, r, &req, &req.Model)
	if !ok {
		return
	}
	if req.Tokens == nil {
		writeError(w, badRequest("tokens", "tokens is required"))
		return
	}
	for i, id := range req.Tokens {
		if id < 0 || id >= eng.VocabSize() {
			writeError(w, badRequest("tokens", "tokens[%d] = %d is not a token id (0 to %d)", i, id, eng.VocabSize()-1))
			return
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Prompt string `json:"prompt"`
	}{eng.Decode(req.Tokens, false)})
}
