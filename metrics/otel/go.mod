module github.com/windowstore/windowstore/metrics/otel

go 1.26.0

require (
	github.com/redis/rueidis v1.0.79
	// v1.0.0 is the version the windowstore v1 release will be tagged with.
	// Inside this repository, the go.work at its root uses the local module instead.
	github.com/windowstore/windowstore v1.0.0
	go.opentelemetry.io/otel v1.44.0
	go.opentelemetry.io/otel/metric v1.44.0
	go.opentelemetry.io/otel/sdk v1.44.0
	go.opentelemetry.io/otel/sdk/metric v1.44.0
	go.opentelemetry.io/otel/trace v1.44.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
