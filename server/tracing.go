package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvroute/kvroute/config"
)

// tracerName is the instrumentation scope of kvroute's spans.
const tracerName = "github.com/kvroute/kvroute/extproc"

// tracingShutdownTimeout bounds the flush of buffered spans at shutdown.
const tracingShutdownTimeout = 5 * time.Second

// newTracer builds the OTLP exporter and tracer provider tracing configures
// (nil, nil when tracing is off). Spans are batched and exported in the
// background; a collector that is down costs dropped spans, never a request.
func newTracer(c config.Tracing) (trace.Tracer, func(context.Context) error, error) {
	if c.Endpoint == "" {
		return nil, nil, nil
	}
	var client otlptrace.Client
	switch c.Protocol {
	case config.TracingHTTP:
		opts := []otlptracehttp.Option{}
		if strings.Contains(c.Endpoint, "://") {
			opts = append(opts, otlptracehttp.WithEndpointURL(c.Endpoint))
		} else {
			opts = append(opts, otlptracehttp.WithEndpoint(c.Endpoint))
		}
		if c.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		client = otlptracehttp.NewClient(opts...)
	default:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(c.Endpoint)}
		if c.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		client = otlptracegrpc.NewClient(opts...)
	}
	exp, err := otlptrace.New(context.Background(), client)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(c.ServiceName))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
	)
	return tp.Tracer(tracerName), tp.Shutdown, nil
}
