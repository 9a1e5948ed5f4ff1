package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
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

// eventJSON is a feature API request as sent: each field raw, so that an
// absent field, a null and a value of the wrong type are told apart
// (parseEvent).
type eventJSON struct {
	ID       json.RawMessage `json:"id"`
	Time     json.RawMessage `json:"time"` // RFC 3339; absent: now
	Entities json.RawMessage `json:"entities"`
	Amount   json.RawMessage `json:"amount"` // an integer, exact over int64: a JSON number or a string
}

// anyKnown reports whether one of the event's entities is among known.
func anyKnown(ents map[string]string, known []string) bool {
	for n := range ents {
		if slices.Contains(known, n) {
			return true
		}
	}
	return false
}

// apiEvent is a feature API request, checked.
type apiEvent struct {
	features.Event
	hasID, hasTime, hasAmount bool
}

// parseEvent decodes and checks a feature API body: an error is the 400
// answer's message, in the terms of the API.
func parseEvent(body io.Reader) (apiEvent, error) {
	var raw eventJSON
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		var big *http.MaxBytesError
		if errors.As(err, &big) {
			return apiEvent{}, fmt.Errorf("the body is larger than %d bytes: %w", big.Limit, err)
		}
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return apiEvent{}, errors.New("empty body: want a JSON object such as {\"entities\": {\"user\": \"42\"}}")
		case errors.As(err, &se):
			return apiEvent{}, fmt.Errorf("the body is not JSON: %v (at byte %d)", se, se.Offset)
		case errors.As(err, &te):
			return apiEvent{}, errors.New("the body must be a JSON object such as {\"entities\": {\"user\": \"42\"}}")
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return apiEvent{}, fmt.Errorf("unknown field %s: an event has id, time, entities and amount", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return apiEvent{}, fmt.Errorf("the body is not JSON: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return apiEvent{}, errors.New("the body holds more than one JSON value")
	}
	var e apiEvent
	isNull := func(m json.RawMessage) bool { return string(bytes.TrimSpace(m)) == "null" }
	str := func(field string, m json.RawMessage) (string, error) {
		var v string
		if isNull(m) {
			return "", fmt.Errorf("%s is null: leave the field out instead", field)
		}
		if err := json.Unmarshal(m, &v); err != nil {
			return "", fmt.Errorf("%s is %s: want a string", field, m)
		}
		if v == "" {
			return "", fmt.Errorf("%s is empty: leave the field out instead", field)
		}
		return v, nil
	}
	var err error
	if e.hasID = raw.ID != nil; e.hasID {
		if e.ID, err = str("id", raw.ID); err != nil {
			return apiEvent{}, err
		}
	}
	if e.hasTime = raw.Time != nil; e.hasTime {
		t, err := str("time", raw.Time)
		if err != nil {
			return apiEvent{}, err
		}
		if e.Time, err = time.Parse(time.RFC3339Nano, t); err != nil {
			return apiEvent{}, fmt.Errorf("time %q: want RFC 3339, such as 2026-11-25T10:00:00Z", t)
		}
	}
	if e.hasAmount = raw.Amount != nil; e.hasAmount {
		a := strings.TrimSpace(string(raw.Amount))
		if isNull(raw.Amount) {
			return apiEvent{}, errors.New("amount is null: leave the field out for an amount of 0")
		}
		if strings.HasPrefix(a, `"`) {
			if err := json.Unmarshal(raw.Amount, &a); err != nil {
				return apiEvent{}, fmt.Errorf("amount %s: want an integer", raw.Amount)
			}
		}
		if e.Amount, err = strconv.ParseInt(a, 10, 64); err != nil {
			return apiEvent{}, fmt.Errorf("amount %s: want an integer from -9223372036854775808 to 9223372036854775807", raw.Amount)
		}
	}
	if raw.Entities == nil || isNull(raw.Entities) {
		return apiEvent{}, errors.New("no entities: want {\"entities\": {\"user\": \"42\"}}")
	}
	var ents map[string]json.RawMessage
	if err := json.Unmarshal(raw.Entities, &ents); err != nil {
		return apiEvent{}, fmt.Errorf("entities is %s: want an object such as {\"user\": \"42\"}", raw.Entities)
	}
	if len(ents) == 0 {
		return apiEvent{}, errors.New("entities is empty: want at least one, such as {\"user\": \"42\"}")
	}
	e.Entities = make(map[string]string, len(ents))
	for name, m := range ents {
		v, err := str(fmt.Sprintf("entity %q", name), m)
		if err != nil {
			return apiEvent{}, err
		}
		e.Entities[name] = v
	}
	return e, nil
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
		e, err := parseEvent(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			code := http.StatusBadRequest
			if big := (*http.MaxBytesError)(nil); errors.As(err, &big) {
				code = http.StatusRequestEntityTooLarge
			}
			jsonError(w, code, err.Error())
			return
		}
		if known := s.rt.Load().cfg.setEntities[name]; !anyKnown(e.Entities, known) {
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("none of the entities is one of feature_set %s's: %s", name, strings.Join(known, ", ")))
			return
		}
		ctx, cancel := s.bounded(r.Context())
		defer cancel()
		var res features.Result
		if write {
			res, err = set.Record(ctx, e.Event)
		} else {
			if e.hasID || e.hasTime || e.hasAmount {
				jsonError(w, http.StatusBadRequest, "read takes entities only: id, time and amount are for record")
				return
			}
			res, err = set.Read(ctx, e.Entities)
		}
		if err != nil {
			// The event's fault is a 4xx, and a retry of it fails the same
			// way: 400 for a bad value or time, 422 for an amount that
			// would take a sum out of int64. The server's is a 503.
			code := http.StatusServiceUnavailable
			switch {
			case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrTooOld), errors.Is(err, store.ErrFuture):
				code = http.StatusBadRequest
			case errors.Is(err, store.ErrOverflow):
				code = http.StatusUnprocessableEntity
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
