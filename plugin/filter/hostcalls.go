package filter

import "github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

// Host calls the filter makes through the SDK in every build (off the
// per-request read path, or needing the SDK's context bookkeeping). The
// hot reads and writes (headers, shared data, metrics, the local reply)
// are direct calls of the ABI, hostcalls_direct.go. Every host call of the filter
// goes through hostcalls*.go, so the filter's contact with the host is one
// list (fleet mode's calls are in fleet*.go).

func logInfo(msg string)  { proxywasm.LogInfo(msg) }
func logWarn(msg string)  { proxywasm.LogWarn(msg) }
func logError(msg string) { proxywasm.LogError(msg) }

func getPluginConfiguration() ([]byte, error) { return proxywasm.GetPluginConfiguration() }

func setTickPeriod(ms uint32) error { return proxywasm.SetTickPeriodMilliSeconds(ms) }

// setEffectiveContext makes the HTTP (or root) context id the target of the
// following stream calls (resume, header changes) outside its callbacks.
func setEffectiveContext(id uint32) error { return proxywasm.SetEffectiveContext(id) }

func resumeRequest() error { return proxywasm.ResumeHttpRequest() }

// replaceRequestHeader sets a request header; the host copies value, so a
// view of a reused buffer may be passed (bytesView).
func replaceRequestHeader(name, value string) error {
	return proxywasm.ReplaceHttpRequestHeader(name, value)
}

func removeRequestHeader(name string) error { return proxywasm.RemoveHttpRequestHeader(name) }

// defineCounter and defineGauge panic when the host refuses (the SDK's
// behaviour); defineMetric recovers.
func defineCounter(name string) uint32 { return uint32(proxywasm.DefineCounterMetric(name)) }
func defineGauge(name string) uint32   { return uint32(proxywasm.DefineGaugeMetric(name)) }

func dispatchHTTPCall(cluster string, headers [][2]string, body []byte, timeoutMS uint32, callback func(numHeaders, bodySize, numTrailers int)) error {
	_, err := proxywasm.DispatchHttpCall(cluster, headers, body, nil, timeoutMS, callback)
	return err
}

func httpCallResponseHeaders() ([][2]string, error) { return proxywasm.GetHttpCallResponseHeaders() }

func httpCallResponseTrailers() ([][2]string, error) { return proxywasm.GetHttpCallResponseTrailers() }

func httpCallResponseBody(start, size int) ([]byte, error) {
	return proxywasm.GetHttpCallResponseBody(start, size)
}

// grpcStatusFromHTTP passed as a local reply's gRPC status leaves it to
// Envoy, which derives a gRPC request's grpc-status from the HTTP status
// (the SDKs' "no status", -1).
const grpcStatusFromHTTP int32 = -1
