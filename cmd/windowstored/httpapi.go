package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxBody is the largest request body the HTTP API reads.
const maxBody = 1 << 20

// routes returns the HTTP API: the feature API, the rate-limit API as JSON
// (as envoyproxy/ratelimit's /json), the health check and the metrics.
func (s *server) routes(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", s.health)
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("POST /json", s.rlsJSON)
	mux.HandleFunc("GET /v1/features", s.listSets)
	mux.HandleFunc("POST /v1/features/{set}/record", s.featureCall(true))
	mux.HandleFunc("POST /v1/features/{set}/read", s.featureCall(false))
	return mux
}

// health answers 200 when the server answers a PING within 2 s, 503 when not.
func (s *server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.client.Do(ctx, s.client.B().Ping().Build()).Error(); err != nil {
		s.log.Warn("health check failed", "err", err)
		http.Error(w, "server unavailable", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "OK\n")
}

// eventJSON is a feature API request: the event to record, or (read) only
// its entities.
type eventJSON struct {
	ID       string            `json:"id"`
	Time     string            `json:"time"` // RFC 3339; empty: now
	Entities map[string]string `json:"entities"`
	Amount   json.Number       `json:"amount"` // an integer, exact up to ±2^63; a string is taken too
}

// resultJSON is a feature API answer.
type resultJSON struct {
	Allowed      bool        `json:"allowed"`
	RefusedBy    []string    `json:"refused_by"`
	RetryAfterMS int64       `json:"retry_after_ms"`
	Duplicate    bool        `json:"duplicate"`
	Features     []valueJSON `json:"features"`
}

type valueJSON struct {
	Name    string        `json:"name"`
	Entity  string        `json:"entity"`
	Kind    string        `json:"kind"`
	Value   int64         `json:"value"`
	Values  []int64       `json:"values"`
	Counted bool          `json:"counted"`
	Limit   *decisionJSON `json:"limit,omitempty"`
	Stats   []statJSON    `json:"stats,omitempty"`
}

// statJSON is a statistic's value over one window (max, min, avg, first,
// last, recent): ok is false when the window has no event.
type statJSON struct {
	OK     bool         `json:"ok"`
	Value  int64        `json:"value"`
	Sum    *int64       `json:"sum,omitempty"`
	Count  *int64       `json:"count,omitempty"`
	Mean   string       `json:"mean,omitempty"`
	Recent []sampleJSON `json:"recent,omitempty"`
}

type sampleJSON struct {
	At    int64 `json:"at"`
	Value int64 `json:"value"`
}

type decisionJSON struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Sum          int64 `json:"sum"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
}

// ms is a wait in whole milliseconds (the store's waits are whole
// milliseconds), -1 for never, as windowctl's retry_after_ms.
func ms(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// featureCall serves record (write true) and read.
func (s *server) featureCall(write bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("set")
		set := s.rt.Load().sets[name]
		if set == nil {
			jsonError(w, http.StatusNotFound, fmt.Sprintf("unknown feature_set %q", name))
			return
		}
		var e eventJSON
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
		dec.DisallowUnknownFields()
		dec.UseNumber()
		if err := dec.Decode(&e); err != nil {
			jsonError(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
			return
		}
		if dec.More() {
			jsonError(w, http.StatusBadRequest, "bad JSON body: more than one value")
			return
		}
		if len(e.Entities) == 0 {
			jsonError(w, http.StatusBadRequest, "no entities: want {\"entities\": {\"user\": \"42\"}}")
			return
		}
		var res features.Result
		var err error
		if write {
			ev := features.Event{ID: e.ID, Entities: e.Entities}
			if e.Time != "" {
				if ev.Time, err = time.Parse(time.RFC3339Nano, e.Time); err != nil {
					jsonError(w, http.StatusBadRequest, fmt.Sprintf("time %q: want RFC 3339, such as 2026-11-25T10:00:00Z", e.Time))
					return
				}
			}
			if e.Amount != "" {
				if ev.Amount, err = strconv.ParseInt(string(e.Amount), 10, 64); err != nil {
					jsonError(w, http.StatusBadRequest, fmt.Sprintf("amount %s: want an integer from -2^63 to 2^63-1", e.Amount))
					return
				}
			}
			res, err = set.Record(r.Context(), ev)
		} else {
			if e.ID != "" || e.Time != "" || e.Amount != "" {
				jsonError(w, http.StatusBadRequest, "read takes entities only: id, time and amount are for record")
				return
			}
			res, err = set.Read(r.Context(), e.Entities)
		}
		if err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrTooOld) || errors.Is(err, store.ErrFuture) {
				code = http.StatusBadRequest
			}
			if code == http.StatusServiceUnavailable {
				s.log.Warn("feature call failed", "feature_set", name, "err", err)
			}
			jsonError(w, code, err.Error())
			return
		}
		out := resultJSON{Allowed: res.Allowed, RefusedBy: res.RefusedBy, RetryAfterMS: ms(res.RetryAfter), Duplicate: res.Duplicate, Features: []valueJSON{}}
		if out.RefusedBy == nil {
			out.RefusedBy = []string{}
		}
		for _, v := range res.Values {
			vj := valueJSON{Name: v.Feature, Entity: v.Entity, Kind: v.Kind.String(), Value: v.Sum, Values: v.Sums, Counted: v.Counted}
			if vj.Values == nil {
				vj.Values = []int64{v.Sum}
			}
			if d := v.Decision; d != nil {
				vj.Limit = &decisionJSON{Allowed: d.Allowed, Limit: d.Limit, Sum: d.Sum, Remaining: d.Remaining, RetryAfterMS: ms(d.RetryAfter)}
			}
			for _, st := range v.Stats {
				sj := statJSON{OK: st.OK, Value: st.Value}
				if v.Kind == features.Avg {
					sj.Sum, sj.Count, sj.Mean = &st.Sum, &st.Count, st.Mean(6)
				}
				for _, x := range st.Recent {
					sj.Recent = append(sj.Recent, sampleJSON(x))
				}
				vj.Stats = append(vj.Stats, sj)
			}
			out.Features = append(out.Features, vj)
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// listSets answers the feature sets and their features.
func (s *server) listSets(w http.ResponseWriter, r *http.Request) {
	rt := s.rt.Load()
	type featureJSON struct {
		Name    string   `json:"name"`
		Entity  string   `json:"entity"`
		Kind    string   `json:"kind"`
		Of      string   `json:"of,omitempty"`
		Windows []string `json:"windows"`
		Limits  []int64  `json:"limits,omitempty"`
	}
	out := map[string][]featureJSON{}
	for _, name := range rt.cfg.setNames {
		fs := []featureJSON{}
		for _, f := range rt.cfg.sets[name] {
			fj := featureJSON{Name: f.Name, Entity: f.Entity, Kind: f.Kind.String(), Of: f.Of, Limits: f.Limits}
			for _, win := range f.Windows {
				fj.Windows = append(fj.Windows, win.Length.String()+"/"+win.Bucket.String())
			}
			fs = append(fs, fj)
		}
		out[name] = fs
	}
	writeJSON(w, http.StatusOK, map[string]any{"feature_sets": out})
}

// rlsJSON serves the rate-limit API over HTTP: a RateLimitRequest in JSON in,
// the RateLimitResponse out, 200 when OK and 429 when OVER_LIMIT.
func (s *server) rlsJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		jsonError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	var req rlspb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		jsonError(w, http.StatusBadRequest, "bad RateLimitRequest JSON: "+err.Error())
		return
	}
	resp, err := s.decide(r.Context(), &req)
	if err != nil {
		code := http.StatusServiceUnavailable
		switch status.Code(err) {
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.NotFound:
			code = http.StatusNotFound
		}
		jsonError(w, code, status.Convert(err).Message())
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

func jsonError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": "windowstored: " + strings.TrimPrefix(msg, "windowstored: ")})
}
