package main

import (
	"fmt"
	"net/http"
)

// healthBody is /health's answer: status ok, loading, calibrating or
// draining, and while not ok the reason in words and, calibrating, how
// far it has got.
type healthBody struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Progress is the fraction (0..1) of the calibration's tokens run.
	Progress    *float64 `json:"progress,omitempty"`
	Tokens      int      `json:"tokens,omitempty"`       // calibration tokens run
	TotalTokens int      `json:"total_tokens,omitempty"` // and in all
}

// health serves /health: 200 when the model is loaded and the server
// takes requests, 503 while it loads (calibrating the KV cache, when the
// cache needs an automatic calibration not yet made) or drains, with the
// reason in the body.
func (s *server) health(w http.ResponseWriter, r *http.Request) {
	b, code := healthBody{Status: "ok"}, http.StatusOK
	switch p := s.calib.Load(); {
	case s.draining.Load():
		b, code = healthBody{Status: "draining", Reason: "the server is shutting down: the requests in flight finish (for up to --drain), new ones are refused"}, http.StatusServiceUnavailable
	case s.eng.Load() != nil:
	case p != nil && p[0] < p[1]:
		f := float64(p[0]) / float64(p[1])
		b = healthBody{Status: "calibrating", Progress: &f, Tokens: p[0], TotalTokens: p[1],
			Reason: fmt.Sprintf("the model is loaded; the KV cache is being calibrated on the built-in text (once per model, then read from --calib-cache): %d of %d tokens", p[0], p[1])}
		code = http.StatusServiceUnavailable
	default:
		b, code = healthBody{Status: "loading", Reason: "the model is loading"}, http.StatusServiceUnavailable
	}
	writeJSON(w, code, b)
}

// calibrationProgress is Load's CalibrationProgress: /health reports it.
func (s *server) calibrationProgress(done, total int) { s.calib.Store(&[2]int{done, total}) }
