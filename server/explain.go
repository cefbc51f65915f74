package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/routing"
)

// maxExplainPath bounds the ?path= (an API path, not data) and the
// ?objective= of /debug/explain.
const maxExplainPath = 256

// Results of kvroute_admin_explain_requests_total.
const (
	explainOK         = "ok"
	explainBadRequest = "bad_request"
	explainTooLarge   = "body_too_large"
	explainBusy       = "busy"
)

// NewAdminMetrics registers the admin listener's own metrics in reg
// (kvroute_admin_explain_requests_total{result}, every result at 0) and
// returns the counter; the Grafana dashboard test walks it with the other
// packages' metrics.
func NewAdminMetrics(reg prometheus.Registerer) *prometheus.CounterVec {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvroute_admin_explain_requests_total",
		Help: fmt.Sprintf("POST /debug/explain requests on the admin listener, by result (ok, bad_request, body_too_large, busy: over the %d served at once, answered 503).", explainConcurrency),
	}, []string{"result"})
	reg.MustRegister(requests)
	for _, r := range []string{explainOK, explainBadRequest, explainTooLarge, explainBusy} {
		requests.WithLabelValues(r)
	}
	return requests
}

// explainHandler answers POST /debug/explain?path=/v1/... : the body is a
// client request, decided by the router exactly as the data plane would be
// but not routed (routing.Router.Explain), and the answer is the
// explanation as JSON. The body is bounded by routing.body_limit_bytes (413
// over). At most cap(slots()) are served at once, each holding a token of
// slots() while it runs; one more is answered 503 before its body is read.
// Logs and metrics carry lengths and outcomes, never the body or path.
func explainHandler(router *routing.Router, par *parity, limit int, slots func() chan struct{}, log *slog.Logger, reg prometheus.Registerer) http.Handler {
	requests := NewAdminMetrics(reg)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sem := slots()
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		default:
			requests.WithLabelValues(explainBusy).Inc()
			log.Info("explain refused: busy", "concurrent", cap(sem))
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy: too many explain requests at once", http.StatusServiceUnavailable)
			return
		}
		path := r.URL.Query().Get("path")
		if path == "" || len(path) > maxExplainPath || !strings.HasPrefix(path, "/") {
			requests.WithLabelValues(explainBadRequest).Inc()
			log.Info("explain refused: bad path", "path_bytes", len(path))
			http.Error(w, "path: want ?path=/v1/completions or /v1/chat/completions (at most 256 bytes)", http.StatusBadRequest)
			return
		}
		// The request's objective (x-gateway-inference-objective), chosen
		// by clients: looked up, never logged.
		objective := r.URL.Query().Get("objective")
		if len(objective) > maxExplainPath {
			requests.WithLabelValues(explainBadRequest).Inc()
			log.Info("explain refused: objective too long", "objective_bytes", len(objective))
			http.Error(w, "objective: at most 256 bytes", http.StatusBadRequest)
			return
		}
		if r.ContentLength > int64(limit) {
			requests.WithLabelValues(explainTooLarge).Inc()
			log.Info("explain refused: body over routing.body_limit_bytes", "content_length", r.ContentLength, "limit", limit)
			http.Error(w, "body over routing.body_limit_bytes", http.StatusRequestEntityTooLarge)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				requests.WithLabelValues(explainTooLarge).Inc()
				log.Info("explain refused: body over routing.body_limit_bytes", "limit", limit)
				http.Error(w, "body over routing.body_limit_bytes", http.StatusRequestEntityTooLarge)
				return
			}
			requests.WithLabelValues(explainBadRequest).Inc()
			log.Info("explain refused: body not read", "bytes", len(body))
			http.Error(w, "body not read", http.StatusBadRequest)
			return
		}
		x := router.Explain(path, body, objective)
		requests.WithLabelValues(explainOK).Inc()
		log.Info("explain", "body_bytes", len(body), "pool", x.Pool, "outcome", x.Outcome, "reason", x.Reason,
			"prompt_tokens", x.PromptTokens, "candidates", len(x.Candidates))
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		found, _ := par.mismatches(x.Pool)
		_ = enc.Encode(explained{Explanation: x, Parity: found})
	})
}

// explained is POST /debug/explain's answer: the decision and the parity
// mismatches of its pool (a pool routing by load for them shows reason
// parity_mismatch).
type explained struct {
	routing.Explanation
	Parity []ParityFinding `json:"parity_mismatches,omitempty"`
}
