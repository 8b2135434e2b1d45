package main

import (
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The attribute otelgrpc puts the call's gRPC status code in ("OK", "UNIMPLEMENTED", ...).
const statusCodeAttribute = "rpc.response.status_code"

// wireCall is one gRPC call the client made, as its OpenTelemetry client span saw it.
type wireCall struct {
	Method  string `json:"method"`
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// wireLog hands the client a tracer provider that records every span, and gives each step the calls made since
// the previous one: the CRI client has no other hook to observe which RPCs it chose (a Stream* call, then the
// List call it fell back to).
type wireLog struct {
	recorder *tracetest.SpanRecorder
	provider *sdktrace.TracerProvider
	taken    int
}

func newWireLog() *wireLog {
	recorder := tracetest.NewSpanRecorder()
	return &wireLog{recorder: recorder, provider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))}
}

// since returns the calls that ended since the last call of since, in the order they ended.
func (w *wireLog) since() []wireCall {
	ended := w.recorder.Ended()
	calls := []wireCall{}
	for _, span := range ended[w.taken:] {
		call := wireCall{Method: strings.TrimPrefix(span.Name(), "runtime.v1."), Code: "OK"}
		for _, attribute := range span.Attributes() {
			if string(attribute.Key) == statusCodeAttribute {
				call.Code = attribute.Value.AsString()
			}
		}
		if call.Code != "OK" {
			call.Message = span.Status().Description
		}
		calls = append(calls, call)
	}
	w.taken = len(ended)
	return calls
}
