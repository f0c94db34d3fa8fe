package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"

	"github.com/kakeya-ai/kakeya"
)

// maxEmbedInputs bounds the texts of one /v1/embeddings request, as the
// OpenAI API does.
const maxEmbedInputs = 2048

// An embedRequest is a decoded, checked /v1/embeddings body.
type embedRequest struct {
	model      string
	input      []string
	base64     bool // encoding_format base64: little-endian float32s
	dimensions int  // 0: the model's hidden size
}

// decodeEmbedRequest parses a /v1/embeddings body; p meets the fields it
// does not implement, as decodeRequest's.
func decodeEmbedRequest(body []byte, p *params) (*embedRequest, *apiError) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, badJSON(err)
	}
	if fields == nil {
		return nil, badRequest("", "the request body must be a JSON object")
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	r := &embedRequest{}
	for _, k := range keys {
		raw := fields[k]
		if isNull(raw) {
			continue
		}
		var err *apiError
		switch k {
		case "model":
			err = decodeField(raw, k, &r.model)
		case "input":
			r.input, err = decodeInput(raw)
		case "encoding_format":
			var f string
			if err = decodeField(raw, k, &f); err == nil {
				switch f {
				case "float":
				case "base64":
					r.base64 = true
				default:
					err = badRequest(k, "encoding_format must be float or base64, got %q", f)
				}
			}
		case "dimensions":
			err = decodeField(raw, k, &r.dimensions)
		case "user":
			var u string
			err = decodeField(raw, k, &u)
		default:
			err = p.field(k, raw, "")
		}
		if err != nil {
			return nil, err
		}
	}
	if fields["input"] == nil || isNull(fields["input"]) {
		return nil, badRequest("input", "input is required: a string or a list of strings")
	}
	return r, nil
}

// decodeInput decodes embeddings' input: a string or a list of 1 to
// maxEmbedInputs strings, none empty. Token-id inputs are not served.
func decodeInput(raw json.RawMessage) ([]string, *apiError) {
	list, single, ok := stringOrList(raw)
	switch {
	case !ok:
		return nil, badRequest("input", "input must be a string or a list of strings (token-id inputs are not supported)")
	case single && list[0] == "":
		return nil, badRequest("input", "input is empty")
	case single:
		return list, nil
	case len(list) == 0:
		return nil, badRequest("input", "input is an empty list")
	case len(list) > maxEmbedInputs:
		return nil, badRequest("input", "input holds %d strings, at most %d", len(list), maxEmbedInputs)
	}
	for i, s := range list {
		if s == "" {
			return nil, badRequest("input", "input[%d] is empty", i)
		}
	}
	return list, nil
}

// embeddings serves /v1/embeddings: each input's vector from the loaded
// model (kakeya.Engine.Embed, pooled by --pooling, unit length), one
// request's texts at a time.
func (s *server) embeddings(w http.ResponseWriter, r *http.Request) {
	eng, body, ok := s.begin(w, r)
	if !ok {
		return
	}
	p := &params{strict: s.strictParams}
	req, aerr := decodeEmbedRequest(body, p)
	s.ignored.note(s.log, r.URL.Path, p.ignored)
	if aerr == nil {
		aerr = s.checkModel(req.model)
	}
	if h := eng.ModelInfo().HiddenSize; aerr == nil && req.dimensions != 0 && req.dimensions != h {
		aerr = badRequest("dimensions", "dimensions %d is not supported: this model's embeddings have %d (leave dimensions out)", req.dimensions, h)
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ctx := r.Context()
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	// One request's texts run at a time: each runs outside the
	// scheduler's batches, on the model's threads.
	select {
	case s.embedSlot <- struct{}{}:
	case <-ctx.Done():
		s.embedError(w, r, eng, ctx.Err())
		return
	}
	vecs, tokens, err := eng.Embed(ctx, req.input, kakeya.EmbedOptions{Pooling: s.pooling, Normalize: true})
	<-s.embedSlot
	if err != nil {
		s.embedError(w, r, eng, err)
		return
	}
	data := make([]embedDatum, len(vecs))
	total := 0
	for i, v := range vecs {
		data[i] = embedDatum{Object: "embedding", Index: i, Embedding: v}
		if req.base64 {
			data[i].Embedding = base64Floats(v)
		}
		total += tokens[i]
	}
	s.metrics.observeEmbed(total)
	info(r).prompt = total
	writeJSON(w, http.StatusOK, embedResponse{Object: "list", Data: data, Model: s.name, Usage: embedUsage{total, total}})
}

// An embedResponse is /v1/embeddings' answer.
type embedResponse struct {
	Object string       `json:"object"`
	Data   []embedDatum `json:"data"`
	Model  string       `json:"model"`
	Usage  embedUsage   `json:"usage"`
}

// An embedDatum is one input's vector.
type embedDatum struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

// embedUsage counts the inputs' tokens.
type embedUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// embedError answers an Embed that failed.
func (s *server) embedError(w http.ResponseWriter, r *http.Request, eng *kakeya.Engine, err error) {
	if s.gone(r) {
		writeError(w, errClientGone)
		return
	}
	aerr := generateError(err, false)
	if aerr.status == http.StatusBadRequest && !errors.Is(err, context.Canceled) {
		aerr.param = "input"
	}
	writeError(w, s.publicError(r, eng, aerr))
}

// base64Floats is the OpenAI API's base64 encoding of a vector: its
// float32s' little-endian bytes.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}
