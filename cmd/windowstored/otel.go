package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/windowstore/windowstore/httplimit"
	wsotel "github.com/windowstore/windowstore/metrics/otel"
	"github.com/windowstore/windowstore/store"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/sdk/trace"
)

// telemetry is windowstored's OpenTelemetry export, set up from the
// standard OTEL_* environment variables (see setupOTel). Its zero value
// exports nothing.
type telemetry struct {
	obs      store.Observer     // the stores' and feature sets' observer, or nil
	rec      httplimit.Recorder // the decisions' recorder, or nil
	shutdown func(context.Context) error
	what     []string // what is exported, for the log
}

// setupOTel exports metrics, and spans unless OTEL_TRACES_EXPORTER is
// "none", over OTLP/gRPC when the environment names a collector
// (OTEL_EXPORTER_OTLP_ENDPOINT, or the _METRICS_ and _TRACES_ endpoints
// each for its own signal). The exporters read the other OTEL_EXPORTER_OTLP_*
// variables themselves (headers, TLS, OTEL_EXPORTER_OTLP_INSECURE, timeout),
// and the metric reader OTEL_METRIC_EXPORT_INTERVAL. OTLP over HTTP is
// refused with an error: only the gRPC protocol is built in.
func setupOTel(ctx context.Context) (telemetry, error) {
	env := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	all := env("OTEL_EXPORTER_OTLP_ENDPOINT")
	metrics := all != "" || env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
	traces := (all != "" || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") && env("OTEL_TRACES_EXPORTER") != "none"
	if !metrics && !traces {
		return telemetry{shutdown: func(context.Context) error { return nil }}, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := env(k); p != "" && p != "grpc" {
			return telemetry{}, fmt.Errorf("windowstored: %s=%s: only grpc is supported", k, p)
		}
	}
	// service.name is windowstored unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "windowstored")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return telemetry{}, fmt.Errorf("windowstored: opentelemetry resource: %w", err)
	}
	var t telemetry
	var opts []wsotel.Option
	var ends []func(context.Context) error
	if metrics {
		exp, err := otlpmetricgrpc.New(ctx)
		if err != nil {
			return telemetry{}, fmt.Errorf("windowstored: otlp metrics: %w", err)
		}
		mp := metric.NewMeterProvider(metric.WithResource(res), metric.WithReader(metric.NewPeriodicReader(exp)))
		ends = append(ends, mp.Shutdown)
		opts = append(opts, wsotel.WithMeterProvider(mp))
		t.what = append(t.what, "metrics")
	}
	if traces {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return telemetry{}, fmt.Errorf("windowstored: otlp traces: %w", err)
		}
		tp := trace.NewTracerProvider(trace.WithResource(res), trace.WithBatcher(exp))
		ends = append(ends, tp.Shutdown)
		opts = append(opts, wsotel.WithTracerProvider(tp))
		t.what = append(t.what, "traces")
	}
	t.shutdown = func(ctx context.Context) error {
		var errs []error
		for _, end := range ends {
			errs = append(errs, end(ctx))
		}
		return errors.Join(errs...)
	}
	obs, err := wsotel.NewObserver(opts...)
	if err != nil {
		return telemetry{}, err
	}
	t.obs = obs
	if metrics {
		// The decisions' names as on /metrics: windowstored.ratelimit.decisions
		// is windowstored_ratelimit_decisions_total there.
		if t.rec, err = wsotel.NewRecorder(append(opts, wsotel.WithPrefix("windowstored"))...); err != nil {
			return telemetry{}, err
		}
	}
	return t, nil
}

// recorders tells every recorder of each decision.
type recorders []httplimit.Recorder

func (rs recorders) Observe(rule string, o httplimit.Outcome, d time.Duration) {
	for _, r := range rs {
		r.Observe(rule, o, d)
	}
}
