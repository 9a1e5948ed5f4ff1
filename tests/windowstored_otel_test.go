package tests

import (
	"context"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/tests/harness"
	metricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// collector is an OTLP/gRPC receiver of metrics and spans: it keeps the names
// of what it was sent, and the service.name of the resources.
type collector struct {
	metricspb.UnimplementedMetricsServiceServer
	mu       sync.Mutex
	metrics  map[string]bool
	spans    map[string]bool
	services map[string]bool
}

func (c *collector) Export(_ context.Context, req *metricspb.ExportMetricsServiceRequest) (*metricspb.ExportMetricsServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, a := range rm.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				c.services[a.GetValue().GetStringValue()] = true
			}
		}
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				c.metrics[m.GetName()] = true
			}
		}
	}
	return &metricspb.ExportMetricsServiceResponse{}, nil
}

// traceService adapts the collector to the trace service, whose method has
// the metrics service's name.
type traceService struct {
	tracepb.UnimplementedTraceServiceServer
	c *collector
}

func (t traceService) Export(_ context.Context, req *tracepb.ExportTraceServiceRequest) (*tracepb.ExportTraceServiceResponse, error) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				t.c.spans[s.GetName()] = true
			}
		}
	}
	return &tracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) has(names map[string]bool, want ...string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !slices.ContainsFunc(want, func(n string) bool { return !names[n] })
}

// TestWindowstoredOTel: with OTEL_EXPORTER_OTLP_ENDPOINT set, windowstored
// exports its decisions' metrics, the stores' operation metrics and their
// spans over OTLP/gRPC to a collector, and flushes them on shutdown (the
// export intervals are too long for anything to leave before it).
func TestWindowstoredOTel(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := &collector{metrics: map[string]bool{}, spans: map[string]bool{}, services: map[string]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	metricspb.RegisterMetricsServiceServer(gs, c)
	tracepb.RegisterTraceServiceServer(gs, traceService{c: c})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)

	d := startWSDEnv(t, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + lis.Addr().String(),
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		// Nothing is exported before the shutdown's flush.
		"OTEL_METRIC_EXPORT_INTERVAL=600000",
		"OTEL_BSP_SCHEDULE_DELAY=600000",
	}, srv.URL(), wsdConfig)
	require.Contains(t, d.logs.String(), "opentelemetry: exporting over OTLP/gRPC")
	for range 3 {
		d.ask(t, "shop", 1, desc("user=otel"), desc("ip=10.9.9.9"))
	}
	require.False(t, c.has(c.metrics, "windowstored.ratelimit.decisions"), "exported before the shutdown")
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("windowstored did not stop")
	}
	require.Equal(t, 0, d.exit, d.logs.String())
	require.True(t, c.has(c.metrics, "windowstored.ratelimit.decisions", "windowstored.ratelimit.decision",
		"windowstore.operations", "windowstore.script.calls"), "metrics: %v", c.metrics)
	require.True(t, c.has(c.spans, "windowstore.apply"), "spans: %v", c.spans)
	require.True(t, c.has(c.services, "windowstored"), "service.name: %v", c.services)
}
