// Sluice test host: Envoy's own wasm host library (proxy-wasm-cpp-host) with
// WAMR, driven over a line protocol on stdin/stdout by the Go package
// plugin/envoyhost.
//
// What comes from the library unchanged: loading and running the module,
// every ABI export (argument checks, memory copies, statuses), shared data,
// shared queues and the WASI imports. What this file provides is what Envoy
// provides through the library's extension points (WasmBase, ContextBase):
// logging, the clocks the WASI clock_time_get reads, header maps with Envoy's
// semantics, local replies, continue_stream, properties, metrics, tick
// timers, dispatch_http_call (queued for the driver to answer) and the plugin
// and VM configuration buffers.
//
// Each VM lives on its own worker thread; VMs with the same vm_id share the
// library's process-wide shared data, so requests on different VMs race on it
// as they do across Envoy's worker threads.
//
// Protocol: one command per line, "<tag> <command> <arg>...", answered by one
// line "<tag> ok <value>..." or "<tag> err <message>". Arguments and values are
// tokens separated by single spaces; in a token every byte outside 0x21-0x7e
// and '%' is written %XX, and the empty string is a lone "%". A list is its
// length followed by its items; a header list is its number of pairs
// followed by name, value, name, value... Answers to commands on different
// VMs may come back in any order: match them by tag. See handle() below.
//
// Licensed under the Apache License, Version 2.0, as the rest of Sluice.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "include/proxy-wasm/context.h"
#include "include/proxy-wasm/pairs_util.h"
#include "include/proxy-wasm/wamr.h"
#include "include/proxy-wasm/wasm.h"
#include "shared_data.h"

using proxy_wasm::ContextBase;
using proxy_wasm::FilterHeadersStatus;
using proxy_wasm::Pairs;
using proxy_wasm::PluginBase;
using proxy_wasm::PluginHandleBase;
using proxy_wasm::WasmBase;
using proxy_wasm::WasmBufferType;
using proxy_wasm::WasmHandleBase;
using proxy_wasm::WasmHeaderMapType;
using proxy_wasm::WasmResult;
using proxy_wasm::WasmStreamType;

namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;
using Tokens = std::vector<std::string>;

// ---------------------------------------------------------------- protocol

std::string esc(std::string_view s) {
  if (s.empty()) return "%";
  static const char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c <= 0x20 || c >= 0x7f || c == '%') {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string unesc(std::string_view s) {
  if (s == "%") return "";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) throw std::runtime_error("truncated %XX escape");
    int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
    if (hi < 0 || lo < 0) throw std::runtime_error("bad %XX escape");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// Envoy's local reply to a gRPC request (Http::Utility::prepareLocalReply):
// trailers-only, :status 200, content-type application/grpc in place of the
// plugin's, grpc-status unless the plugin set one (its gRPC status, or
// gRPC's mapping of the HTTP status), the body percent-encoded in
// grpc-message. A request is gRPC as Grpc::Common::isGrpcRequestHeaders
// says: a :path, and content-type application/grpc alone or followed by '+'.
bool isGrpcRequest(const Headers &req) {
  bool path = false, grpc = false;
  const std::string prefix = "application/grpc";
  for (auto &kv : req) {
    if (kv.first == ":path") path = true;
    if (kv.first == "content-type")
      grpc = kv.second.compare(0, prefix.size(), prefix) == 0 &&
             (kv.second.size() == prefix.size() || kv.second[prefix.size()] == '+');
  }
  return path && grpc;
}

int grpcOfHttp(uint32_t code) {
  switch (code) {
  case 400: return 13;
  case 401: return 16;
  case 403: return 7;
  case 404: return 12;
  case 429: case 502: case 503: case 504: return 14;
  }
  return 2;
}

void grpcReply(Headers &h, uint32_t code, const std::string &body, int grpc) {
  h[0].second = "200";
  bool has_type = false, has_status = false;
  for (auto &kv : h) {
    if (kv.first == "content-type") {
      kv.second = "application/grpc";
      has_type = true;
    }
    has_status |= kv.first == "grpc-status";
  }
  if (!has_type) h.emplace_back("content-type", "application/grpc");
  if (!has_status) h.emplace_back("grpc-status", std::to_string(grpc >= 0 ? grpc : grpcOfHttp(code)));
  if (!body.empty()) {
    static const char hex[] = "0123456789ABCDEF";
    std::string m;
    for (char c : body) {
      if (c < ' ' || c >= '~' || c == '%') {
        unsigned char u = static_cast<unsigned char>(c);
        m += '%';
        m += hex[u >> 4];
        m += hex[u & 15];
      } else {
        m += c;
      }
    }
    h.emplace_back("grpc-message", m);
  }
}

Tokens split(const std::string &line) {
  Tokens t;
  size_t i = 0;
  while (i <= line.size()) {
    size_t j = line.find(' ', i);
    if (j == std::string::npos) j = line.size();
    if (j > i) t.push_back(line.substr(i, j - i));
    i = j + 1;
  }
  return t;
}

// Args reads the arguments of one command in order.
struct Args {
  const Tokens &t;
  size_t i;
  std::string str() {
    if (i >= t.size()) throw std::runtime_error("missing argument " + std::to_string(i));
    return unesc(t[i++]);
  }
  int64_t num() {
    std::string s = str();
    char *end = nullptr;
    errno = 0;
    long long v = strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != 0 || errno != 0) throw std::runtime_error("argument " + std::to_string(i - 1) + ": not an integer: " + s);
    return v;
  }
  Headers headers() {
    int64_t n = num();
    if (n < 0 || n > 1 << 20) throw std::runtime_error("bad list length");
    Headers h;
    for (int64_t k = 0; k < n; k++) {
      std::string name = str();
      h.emplace_back(name, str());
    }
    return h;
  }
  void end() {
    if (i != t.size()) throw std::runtime_error("unexpected argument " + std::to_string(i));
  }
};

void appendHeaders(std::string &out, const Headers &h) {
  out += ' ';
  out += std::to_string(h.size());
  for (auto &kv : h) {
    out += ' ';
    out += esc(kv.first);
    out += ' ';
    out += esc(kv.second);
  }
}

std::mutex out_mu;
void reply(const std::string &tag, const std::string &body) {
  std::string line = tag + " " + body + "\n";
  std::lock_guard<std::mutex> l(out_mu);
  fwrite(line.data(), 1, line.size(), stdout);
  fflush(stdout);
}
void replyErr(const std::string &tag, const std::string &msg) { reply(tag, "err " + esc(msg)); }

// ---------------------------------------------------------------- process-wide state

struct Settings {
  std::string node_id, plugin_name, root_id, vm_id;
  bool any_cluster = true;
  std::vector<std::string> clusters;
  int64_t start_real_ns = 0;
} settings;

// The clock: realtime and monotonic move together, only with "advance".
std::atomic<int64_t> clock_offset{0};
const int64_t kMonotonicBase = 1000000000; // the monotonic clock starts at 1 s
int64_t nowReal() { return settings.start_real_ns + clock_offset.load(); }
int64_t nowMono() { return kMonotonicBase + clock_offset.load(); }

const char *kLevelNames[] = {"trace", "debug", "info", "warn", "error", "critical"};
std::mutex log_mu;
std::vector<std::string> logs;
void addLog(int vm, uint32_t level, std::string_view msg) {
  std::string line = "vm " + std::to_string(vm) + " [" +
                     (level < 6 ? kLevelNames[level] : ("level(" + std::to_string(level) + ")").c_str()) +
                     "] " + std::string(msg);
  std::lock_guard<std::mutex> l(log_mu);
  logs.push_back(std::move(line));
}
std::string logsOfVM(int vm, size_t from) {
  std::lock_guard<std::mutex> l(log_mu);
  std::string prefix = "vm " + std::to_string(vm) + " ", out;
  for (size_t i = from; i < logs.size(); i++) {
    if (logs[i].compare(0, prefix.size(), prefix) == 0) out += "\n  " + logs[i];
  }
  return out;
}
size_t logCount() {
  std::lock_guard<std::mutex> l(log_mu);
  return logs.size();
}

// Metrics, shared by name across VMs like Envoy's stats. The id encodes the
// type in its low two bits, as Envoy's do.
struct Metric {
  std::string name;
  uint32_t type;
  int64_t value = 0;
};
std::mutex metric_mu;
std::vector<Metric> metrics;
std::unordered_map<std::string, uint32_t> metric_index;

// Pending dispatch_http_call calls, by driver-visible id.
struct PendingCall {
  int vm;
  uint32_t token;
  uint32_t root_id;
  std::string cluster;
  Headers headers;
  std::string body;
  int64_t deadline_mono;
};
std::mutex call_mu;
std::map<uint32_t, PendingCall> calls;
uint32_t next_call_id = 1;

struct Worker;
std::vector<std::unique_ptr<Worker>> workers;
std::mutex stream_mu;
std::unordered_map<uint64_t, int> stream_vm; // paused stream id -> VM
std::atomic<uint64_t> next_stream_id{1};

// ---------------------------------------------------------------- streams

struct StreamState {
  uint64_t id = 0;
  Headers req, resp, upstream_resp;
  // Response trailers from upstream (delivered after the headers when not
  // empty; has_trailers once delivered), and a reset after the request, or
  // an upstream that has not answered yet (hold_upstream: the stream stays
  // open until complete or reset).
  Headers upstream_trailers;
  bool has_trailers = false, reset_after_request = false, hold_upstream = false;
  bool has_resp = false, in_log = false;
  // The upstream's response body, in the chunks (data frames) it arrives
  // in, and a reset after that many of them (0: none). During
  // on_response_body, chunk is the HttpResponseBody buffer. resp_sent: the
  // response headers went downstream (on_response_headers returned without
  // a local reply), so a local reply can no longer replace the response.
  std::vector<std::string> upstream_body;
  int64_t reset_after_chunks = 0;
  const std::string *chunk = nullptr;
  bool resp_sent = false, reply_in_body = false;
  std::string down_body; // the chunks that went downstream
  std::map<std::string, std::string> props; // per-request properties by dotted path
  int64_t created_ns = 0;
  // Local reply.
  bool local_sent = false, rejected = false;
  int status = 0;
  std::string local_body;
  // The reply's response code details, white space replaced as Envoy does.
  std::string local_details;
  // continue_stream ran (after its callback).
  bool continued = false;
  bool forwarded = false; // upstream_headers valid
  Headers upstream_headers;
};

class HostWasm;

class HostContext : public ContextBase {
public:
  HostContext(WasmBase *wasm) : ContextBase(wasm) {}
  HostContext(WasmBase *wasm, const std::shared_ptr<PluginBase> &plugin) : ContextBase(wasm, plugin) {}
  HostContext(WasmBase *wasm, uint32_t parent, std::shared_ptr<PluginHandleBase> &handle)
      : ContextBase(wasm, parent, handle) {}

  // Envoy's Context destructor cancels the context's outstanding HTTP
  // calls: no answer reaches the plugin, and none is pending any more.
  ~HostContext() override;

  HostWasm *hw();
  int vmIndex();
  int vm_index = -1; // a root context's VM (createRootContext), for the destructor
  // The root context answering an HTTP call right now, if any.
  HostContext *callRoot() {
    auto *r = static_cast<HostContext *>(root_context());
    return r && r->call_headers ? r : nullptr;
  }

  StreamState *stream = nullptr;          // stream contexts
  const Headers *call_headers = nullptr;  // root contexts, during on_http_call_response
  std::string_view call_body;
  std::map<std::string, std::string> set_props;
  proxy_wasm::BufferBase buffer;
  // The response body: readable, not writable here (Envoy lets the plugin
  // change it; the filter does not).
  struct ReadOnlyBody : proxy_wasm::BufferBase {
    WasmResult copyFrom(size_t, size_t, std::string_view) override { return WasmResult::Unimplemented; }
  } body_buffer;

  void error(std::string_view message) override;
  WasmResult unimplemented() override { return WasmResult::Unimplemented; }

  WasmResult log(uint32_t level, std::string_view message) override {
    addLog(vmIndex(), level, message);
    return WasmResult::Ok;
  }
  uint32_t getLogLevel() override { return 0; }
  uint64_t getCurrentTimeNanoseconds() override { return nowReal(); }
  uint64_t getMonotonicTimeNanoseconds() override { return nowMono(); }
  std::string_view getConfiguration() override {
    return plugin_ ? std::string_view(plugin_->plugin_configuration_) : std::string_view();
  }
  std::pair<uint32_t, std::string_view> getStatus() override { return {0, ""}; }

  proxy_wasm::BufferInterface *getBuffer(WasmBufferType type) override {
    switch (type) {
    case WasmBufferType::PluginConfiguration:
      // Envoy: only while on_configure runs (the library's temp_plugin_).
      if (temp_plugin_) return buffer.set(temp_plugin_->plugin_configuration_);
      return nullptr;
    case WasmBufferType::VmConfiguration:
      return buffer.set(wasm()->vm_configuration());
    case WasmBufferType::HttpCallResponseBody:
      // Envoy: the root context's http_call_response_, whatever the
      // effective context (the Go SDK switches to the calling stream's).
      if (auto *r = callRoot()) return buffer.set(r->call_body);
      return nullptr;
    case WasmBufferType::HttpResponseBody:
      // Envoy (Context::getBuffer) always has this buffer: the current
      // chunk during on_response_body (encodeData), else empty.
      body_buffer.set(stream && stream->chunk ? std::string_view(*stream->chunk) : std::string_view());
      return &body_buffer;
    default:
      return nullptr;
    }
  }
  bool endOfStream(WasmStreamType) override { return true; }

  // Header maps (Envoy: names lower-cased, get the first value, replace the
  // first entry, remove every entry; a map that does not exist is BadArgument;
  // read-only during on_log).
  Headers *getMap(WasmHeaderMapType type, bool write) {
    if (stream && stream->in_log && write) return nullptr;
    switch (type) {
    case WasmHeaderMapType::RequestHeaders:
      return stream ? &stream->req : nullptr;
    case WasmHeaderMapType::ResponseHeaders:
      return stream && stream->has_resp ? &stream->resp : nullptr;
    case WasmHeaderMapType::ResponseTrailers:
      // Read-only here: the filter only reads them.
      return stream && stream->has_trailers && !write ? &stream->upstream_trailers : nullptr;
    case WasmHeaderMapType::HttpCallResponseHeaders:
      if (auto *r = callRoot()) return const_cast<Headers *>(r->call_headers);
      return nullptr;
    default:
      return nullptr;
    }
  }
  static std::string lower(std::string_view s) {
    std::string o(s);
    for (auto &c : o)
      if (c >= 'A' && c <= 'Z') c = c - 'A' + 'a';
    return o;
  }
  WasmResult addHeaderMapValue(WasmHeaderMapType type, std::string_view key, std::string_view value) override {
    auto *m = getMap(type, true);
    if (!m || type == WasmHeaderMapType::HttpCallResponseHeaders) return WasmResult::BadArgument;
    m->emplace_back(lower(key), std::string(value));
    return WasmResult::Ok;
  }
  WasmResult getHeaderMapValue(WasmHeaderMapType type, std::string_view key, std::string_view *result) override {
    auto *m = getMap(type, false);
    if (!m) return WasmResult::BadArgument;
    std::string k = lower(key);
    for (auto &kv : *m) {
      if (kv.first == k) {
        *result = kv.second;
        return WasmResult::Ok;
      }
    }
    return WasmResult::NotFound;
  }
  WasmResult getHeaderMapPairs(WasmHeaderMapType type, Pairs *result) override {
    auto *m = getMap(type, false);
    if (!m) return WasmResult::BadArgument;
    result->reserve(m->size()); // as Envoy's headerMapToPairs does
    for (auto &kv : *m) result->emplace_back(kv.first, kv.second);
    return WasmResult::Ok;
  }
  WasmResult setHeaderMapPairs(WasmHeaderMapType type, const Pairs &pairs) override {
    auto *m = getMap(type, true);
    if (!m || type == WasmHeaderMapType::HttpCallResponseHeaders) return WasmResult::BadArgument;
    Headers n;
    for (auto &kv : pairs) n.emplace_back(lower(kv.first), std::string(kv.second));
    *m = std::move(n);
    return WasmResult::Ok;
  }
  WasmResult removeHeaderMapValue(WasmHeaderMapType type, std::string_view key) override {
    auto *m = getMap(type, true);
    if (!m || type == WasmHeaderMapType::HttpCallResponseHeaders) return WasmResult::BadArgument;
    std::string k = lower(key);
    Headers n;
    for (auto &kv : *m)
      if (kv.first != k) n.push_back(kv);
    *m = std::move(n);
    return WasmResult::Ok;
  }
  WasmResult replaceHeaderMapValue(WasmHeaderMapType type, std::string_view key, std::string_view value) override {
    auto *m = getMap(type, true);
    if (!m || type == WasmHeaderMapType::HttpCallResponseHeaders) return WasmResult::BadArgument;
    std::string k = lower(key);
    for (auto &kv : *m) {
      if (kv.first == k) {
        kv.second = std::string(value);
        return WasmResult::Ok;
      }
    }
    m->emplace_back(k, std::string(value));
    return WasmResult::Ok;
  }
  WasmResult getHeaderMapSize(WasmHeaderMapType type, uint32_t *result) override {
    auto *m = getMap(type, false);
    if (!m) return WasmResult::BadArgument;
    uint32_t n = 0;
    for (auto &kv : *m) n += kv.first.size() + kv.second.size();
    *result = n;
    return WasmResult::Ok;
  }

  // Local replies and continue_stream take effect after the callback.
  WasmResult sendLocalResponse(uint32_t code, std::string_view body, Pairs additional,
                               proxy_wasm::GrpcStatusCode, std::string_view details) override;
  WasmResult continueStream(WasmStreamType type) override {
    if (!stream || type != WasmStreamType::Request) return WasmResult::BadArgument;
    StreamState *s = stream;
    wasm()->addAfterVmCallAction([s] { s->continued = true; });
    return WasmResult::Ok;
  }
  // Not modelled (as in plugin/wasmhost): Envoy resets the stream.
  WasmResult closeStream(WasmStreamType) override { return WasmResult::Unimplemented; }
  void clearRouteCache() override {}

  WasmResult httpCall(std::string_view target, const Pairs &headers, std::string_view body,
                      const Pairs &trailers, int timeout_ms, uint32_t *token_ptr) override;

  WasmResult defineMetric(uint32_t type, std::string_view name, uint32_t *id) override {
    if (type > 2) return WasmResult::BadArgument;
    std::lock_guard<std::mutex> l(metric_mu);
    std::string n(name);
    auto it = metric_index.find(n);
    uint32_t idx;
    if (it == metric_index.end()) {
      idx = metrics.size();
      metrics.push_back(Metric{n, type, 0});
      metric_index[n] = idx;
    } else {
      idx = it->second;
    }
    *id = ((idx + 1) << 2) | metrics[idx].type;
    return WasmResult::Ok;
  }
  Metric *metricOf(uint32_t id) {
    uint32_t idx = (id >> 2) - 1;
    if ((id >> 2) == 0 || idx >= metrics.size() || metrics[idx].type != (id & 3)) return nullptr;
    return &metrics[idx];
  }
  WasmResult incrementMetric(uint32_t id, int64_t offset) override {
    std::lock_guard<std::mutex> l(metric_mu);
    auto *m = metricOf(id);
    if (!m) return WasmResult::NotFound;
    if (m->type == 0) {
      if (offset <= 0) return WasmResult::BadArgument;
      m->value += offset;
    } else if (m->type == 1) {
      m->value += offset;
    } else {
      return WasmResult::BadArgument;
    }
    return WasmResult::Ok;
  }
  WasmResult recordMetric(uint32_t id, uint64_t value) override {
    std::lock_guard<std::mutex> l(metric_mu);
    auto *m = metricOf(id);
    if (!m) return WasmResult::NotFound;
    if (m->type == 0) m->value += value;
    else if (m->type == 1) m->value = value;
    return WasmResult::Ok;
  }
  WasmResult getMetric(uint32_t id, uint64_t *value) override {
    std::lock_guard<std::mutex> l(metric_mu);
    auto *m = metricOf(id);
    if (!m) return WasmResult::NotFound;
    if (m->type == 2) return WasmResult::BadArgument;
    *value = m->value;
    return WasmResult::Ok;
  }

  WasmResult getProperty(std::string_view path, std::string *result) override;
  WasmResult setProperty(std::string_view key, std::string_view value) override {
    set_props[std::string(key)] = std::string(value);
    return WasmResult::Ok;
  }
};

struct Timer {
  int64_t period_ns = 0;
  int64_t next = 0;
};

class HostWasm : public WasmBase {
public:
  HostWasm(std::unique_ptr<proxy_wasm::WasmVm> vm, std::unordered_map<std::string, std::string> envs,
           std::string_view vm_id, Worker *w)
      : WasmBase(std::move(vm), vm_id, "", vm_id, std::move(envs), {}), worker(w) {}
  ContextBase *createVmContext() override { return new HostContext(this); }
  ContextBase *createRootContext(const std::shared_ptr<PluginBase> &p) override;
  ContextBase *createContext(const std::shared_ptr<PluginBase> &p) override { return new HostContext(this, p); }
  void setTimerPeriod(uint32_t root_id, std::chrono::milliseconds period) override {
    auto &t = timers[root_id];
    t.period_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(period).count();
    t.next = nowMono() + t.period_ns;
  }
  proxy_wasm::CallOnThreadFunction callOnThreadFunction() override;
  void error(std::string_view message) override;

  Worker *worker;
  std::map<uint32_t, Timer> timers;
};

struct Integration : proxy_wasm::WasmVmIntegration {
  Worker *w;
  explicit Integration(Worker *w) : w(w) {}
  WasmVmIntegration *clone() override { return new Integration(w); }
  // Envoy's integration answers with its "wasm" logger's level, info unless
  // Envoy runs with -l trace. At trace the library formats the arguments of
  // every host call and callback into a string (wamr.cc printValues), which
  // Envoy does not pay for: trace only while the "profile" command counts
  // the crossings, from those lines.
  proxy_wasm::LogLevel getLogLevel() override;
  void error(std::string_view message) override;
  void trace(std::string_view message) override;
  bool getNullVmFunction(std::string_view, bool, int, proxy_wasm::NullPlugin *, void *) override { return false; }
};

// ---------------------------------------------------------------- workers

struct Response {
  bool rejected = false, paused = false, held = false, forwarded = false;
  int status = 0;
  std::string body, details, down_body;
  Headers upstream, resp;
  uint64_t stream = 0;
};

// threadCPU is the calling thread's CPU time in ns.
int64_t threadCPU() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Profile is what the "profile" command collects on a worker: the time in
// each stream callback and, when counting, the crossings by name.
enum Callback { kCreate, kRequestHeaders, kResponseHeaders, kLog, kDone, kDelete, kCallbacks };
struct Profile {
  int64_t ns[kCallbacks] = {};
  bool count = false;
  std::map<std::string, int64_t> calls;
};
// Timed adds the time until the end of its scope to a profile's callback
// (wall time: the thread's CPU clock is a system call here, microseconds).
struct Timed {
  Profile *p;
  Callback c;
  std::chrono::steady_clock::time_point t0;
  Timed(Profile *p, Callback c) : p(p), c(c) {
    if (p) t0 = std::chrono::steady_clock::now();
  }
  ~Timed() {
    if (p) p->ns[c] += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  }
};

struct Worker {
  int index;
  Profile *prof = nullptr; // during the "profile" command
  std::thread th;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> q;

  // Owned by the worker thread.
  std::shared_ptr<HostWasm> wasm;
  std::shared_ptr<WasmHandleBase> wasm_handle;
  std::shared_ptr<PluginBase> plugin, next_plugin;
  std::shared_ptr<PluginHandleBase> plugin_handle, next_handle;
  HostContext *root = nullptr;
  std::string vm_errors; // from the library (traps, load failures)
  std::string broken;    // set once a trap broke the VM
  std::map<uint64_t, std::unique_ptr<StreamState>> streams;
  std::map<uint64_t, HostContext *> stream_ctx;
  int generation = 0;

  explicit Worker(int i) : index(i) {
    th = std::thread([this] { loop(); });
  }
  void post(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> l(mu);
      q.push_back(std::move(f));
    }
    cv.notify_one();
  }
  void loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [this] { return !q.empty(); });
        f = std::move(q.front());
        q.pop_front();
      }
      f();
    }
  }

  std::string name() { return "VM " + std::to_string(index); }

  // check throws after a callback that failed the VM (a trap).
  void check(const char *callback) {
    if (!broken.empty()) throw std::runtime_error(broken);
    if (wasm && (wasm->isFailed() || wasm->wasm_vm()->isFailed())) {
      broken = name() + ": trap in " + callback + ": " + vm_errors;
      while (!broken.empty() && broken.back() == '\n') broken.pop_back();
      throw std::runtime_error(broken);
    }
  }
  void usable() {
    if (!broken.empty()) throw std::runtime_error(broken + " (the VM failed earlier)");
    if (!wasm) throw std::runtime_error(name() + " is not started");
  }

  // Each VM is created as Envoy creates a worker's VM, on its own thread:
  // getOrCreateThreadLocalPlugin (the library's thread-local VM and plugin
  // caches, which shared-queue notifications look VMs up in) with a clone
  // factory that loads the module, then _initialize, root context
  // (on_context_create, on_vm_start) and on_configure, all by the library.
  std::shared_ptr<HostWasm> base;
  std::shared_ptr<WasmHandleBase> base_handle;
  std::string code;
  std::unordered_map<std::string, std::string> env;

  std::shared_ptr<PluginBase> newPlugin(const std::string &config) {
    return std::make_shared<PluginBase>(settings.plugin_name, settings.root_id, settings.vm_id, "wamr", config, false,
                                        "generation " + std::to_string(generation++));
  }
  std::unique_ptr<proxy_wasm::WasmVm> newVm() {
    auto vm = proxy_wasm::createWamrVm();
    vm->integration().reset(new Integration(this));
    return vm;
  }

  // plugin starts p on this thread's VM (creating the VM the first time).
  std::shared_ptr<PluginHandleBase> startPlugin(const std::shared_ptr<PluginBase> &p) {
    size_t log_from = logCount();
    auto clone = [this](std::shared_ptr<WasmHandleBase>) -> std::shared_ptr<WasmHandleBase> {
      auto w = std::make_shared<HostWasm>(newVm(), env, settings.vm_id, this);
      if (!w->load(code, false)) return nullptr;
      wasm = w;
      wasm_handle = std::make_shared<WasmHandleBase>(w);
      return wasm_handle;
    };
    auto make_handle = [](std::shared_ptr<WasmHandleBase> wh, std::shared_ptr<PluginBase> pl) {
      return std::make_shared<PluginHandleBase>(wh, pl);
    };
    auto handle = proxy_wasm::getOrCreateThreadLocalPlugin(base_handle, p, clone, make_handle);
    const char *phase = "proxy_on_configure";
    switch (base->fail_state()) {
    case proxy_wasm::FailState::UnableToCloneVm:
      throw std::runtime_error(name() + ": the module did not load: " + vm_errors + logsOfVM(index, log_from));
    case proxy_wasm::FailState::UnableToInitializeCode:
      phase = "_initialize";
      break;
    case proxy_wasm::FailState::StartFailed:
      phase = "proxy_on_vm_start";
      break;
    default:
      break;
    }
    check(phase);
    if (!handle) {
      std::string what = base->fail_state() == proxy_wasm::FailState::StartFailed
                             ? "proxy_on_vm_start returned false"
                         : base->fail_state() == proxy_wasm::FailState::UnableToInitializeCode
                             ? "the module did not initialize"
                             : "proxy_on_configure returned false (the plugin rejected its configuration)";
      base_reset();
      throw std::runtime_error(name() + ": " + what + logsOfVM(index, log_from));
    }
    return handle;
  }
  // base_reset clears the failure state startPlugin reads.
  void base_reset() {
    base = std::make_shared<HostWasm>(newVm(), env, settings.vm_id, this);
    base_handle = std::make_shared<WasmHandleBase>(base);
  }

  void start(const std::string &module, const std::string &config,
             const std::unordered_map<std::string, std::string> &environment) {
    code = module;
    env = environment;
    base_reset();
    plugin = newPlugin(config);
    plugin_handle = startPlugin(plugin);
    root = static_cast<HostContext *>(wasm->getRootContext(plugin, false));
  }

  // prepare starts a new root context with the new configuration, as Envoy
  // does for a configuration-only update; commit or abort follows.
  void prepare(const std::string &config) {
    usable();
    next_plugin = newPlugin(config);
    next_handle.reset();
    next_handle = startPlugin(next_plugin);
  }
  void commit() {
    plugin = next_plugin;
    root = static_cast<HostContext *>(wasm->getRootContext(plugin, false));
    // The old handle goes when the last stream holding it ends; its root
    // context then gets on_done and on_delete (the library's startShutdown).
    plugin_handle = next_handle;
    next_plugin.reset();
    next_handle.reset();
  }
  void abort() {
    // A root context the update created stays in the VM until shut down.
    if (next_plugin && broken.empty()) wasm->startShutdown(next_plugin->key());
    next_plugin.reset();
    next_handle.reset();
  }

  // Streams.
  HostContext *newStream(StreamState *s) {
    auto *ctx = new HostContext(wasm.get(), root->id(), plugin_handle);
    ctx->stream = s;
    s->created_ns = nowReal();
    return ctx;
  }

  void applyLocalReply(HostContext *ctx, uint32_t code, const std::string &body, const Headers &extra, int grpc) {
    StreamState *s = ctx->stream;
    if (s->resp_sent) {
      // The response headers already went downstream: Envoy cannot reply
      // any more and resets the stream; the response stays as it went.
      s->rejected = true;
      s->local_body = body;
      s->reply_in_body = true;
      return;
    }
    bool request_phase = !s->has_resp;
    Headers h;
    h.emplace_back(":status", std::to_string(code));
    for (auto &kv : extra) h.push_back(kv);
    bool is_grpc = isGrpcRequest(s->req);
    if (is_grpc) {
      grpcReply(h, code, body, grpc);
      code = 200;
    } else if (!body.empty()) {
      // Envoy's sendLocalReply: content-length set, content-type text/plain
      // unless the plugin's headers carry one.
      bool has_type = false;
      for (auto &kv : h) has_type |= kv.first == "content-type";
      h.emplace_back("content-length", std::to_string(body.size()));
      if (!has_type) h.emplace_back("content-type", "text/plain");
    }
    s->rejected = true;
    s->status = code;
    s->local_body = body;
    bool end_stream = body.empty() || is_grpc;
    s->resp = std::move(h);
    s->has_resp = true;
    if (request_phase) {
      // Envoy sends the reply through the encoder filters: the plugin sees
      // its own reply in on_response_headers.
      Timed t(prof, kResponseHeaders);
      ctx->onResponseHeaders(s->resp.size(), end_stream);
    }
  }

  void finish(HostContext *ctx) {
    StreamState *s = ctx->stream;
    s->in_log = true;
    {
      Timed t(prof, kLog);
      ctx->onLog();
    }
    check("proxy_on_log");
    {
      Timed t(prof, kDone);
      ctx->onDone();
    }
    check("proxy_on_done");
    {
      Timed t(prof, kDelete);
      ctx->onDelete();
    }
    check("proxy_on_delete");
    delete ctx;
  }

  // forward delivers the upstream's answer: the response headers, the body
  // chunk by chunk (end of stream on the last unless trailers follow), the
  // trailers. A reset (after reset_after_chunks chunks, or by a local reply
  // once the response headers went downstream) ends it early: the caller's
  // finish runs on_log, on_done and on_delete either way.
  void forward(HostContext *ctx) {
    StreamState *s = ctx->stream;
    s->forwarded = true;
    s->upstream_headers = s->req;
    s->resp = s->upstream_resp;
    s->has_resp = true;
    for (auto &kv : s->resp)
      if (kv.first == ":status") s->status = atoi(kv.second.c_str());
    bool trailers = !s->upstream_trailers.empty();
    size_t chunks = s->upstream_body.size();
    bool cut = s->reset_after_chunks > 0;
    if (cut) chunks = static_cast<size_t>(s->reset_after_chunks);
    {
      Timed t(prof, kResponseHeaders);
      ctx->onResponseHeaders(s->resp.size(), chunks == 0 && !trailers);
    }
    check("proxy_on_response_headers");
    if (s->local_sent) return; // the reply replaced the response
    s->resp_sent = true;
    for (size_t i = 0; i < chunks; i++) {
      const std::string &c = s->upstream_body[i];
      s->chunk = &c;
      auto st = ctx->onResponseBody(c.size(), !cut && i + 1 == chunks && !trailers);
      s->chunk = nullptr;
      check("proxy_on_response_body");
      if (s->reply_in_body) return; // Envoy resets the stream
      if (st != proxy_wasm::FilterDataStatus::Continue) {
        static const char *names[] = {"Continue", "StopIterationAndBuffer", "StopIterationAndWatermark",
                                      "StopIterationNoBuffer"};
        throw std::runtime_error(std::string("proxy_on_response_body returned ") + names[static_cast<int>(st) & 3] +
                                 ": buffering the response body is not supported by this test host (only Continue is)");
      }
      s->down_body += c;
    }
    if (cut) return;
    if (trailers) {
      s->has_trailers = true;
      ctx->onResponseTrailers(s->upstream_trailers.size());
      check("proxy_on_response_trailers");
    }
  }

  Response result(StreamState *s) {
    Response r;
    r.rejected = s->rejected;
    r.status = s->status;
    r.body = s->local_body;
    r.details = s->local_details;
    r.forwarded = s->forwarded;
    r.upstream = s->upstream_headers;
    r.resp = s->resp;
    r.down_body = s->down_body;
    return r;
  }

  // http runs one stream; a paused one stays in streams.
  Response http(std::unique_ptr<StreamState> sp, bool keep_paused = true) {
    usable();
    StreamState *s = sp.get();
    HostContext *ctx = newStream(s);
    {
      Timed t(prof, kCreate);
      ctx->onCreate();
    }
    check("proxy_on_context_create");
    FilterHeadersStatus st;
    {
      Timed t(prof, kRequestHeaders);
      st = ctx->onRequestHeaders(s->req.size(), true);
    }
    check("proxy_on_request_headers");
    if (!s->rejected) {
      if ((st == FilterHeadersStatus::Continue || s->continued) && s->reset_after_request) {
        // Reset after the request went upstream, before any response.
        s->forwarded = true;
        s->upstream_headers = s->req;
        s->status = 0;
      } else if ((st == FilterHeadersStatus::Continue || s->continued) && s->hold_upstream) {
        // The request went upstream, which has not answered: the stream
        // stays open.
        s->continued = true;
        Response r = result(s);
        r.forwarded = true;
        r.upstream = s->req;
        r.held = true;
        r.stream = s->id;
        keep(std::move(sp), ctx);
        return r;
      } else if (st == FilterHeadersStatus::Continue || s->continued) {
        forward(ctx);
      } else {
        Response r;
        r.paused = true;
        r.stream = s->id;
        if (!keep_paused) throw std::runtime_error("the request paused");
        keep(std::move(sp), ctx);
        return r;
      }
    }
    Response r = result(s);
    finish(ctx);
    return r;
  }

  // keep holds an open stream (paused, or waiting for its upstream) for
  // settled, complete and reset.
  void keep(std::unique_ptr<StreamState> sp, HostContext *ctx) {
    uint64_t id = sp->id;
    {
      std::lock_guard<std::mutex> l(stream_mu);
      stream_vm[id] = index;
    }
    streams[id] = std::move(sp);
    stream_ctx[id] = ctx;
  }

  StreamState *paused(uint64_t id, HostContext **ctx) {
    auto it = streams.find(id);
    if (it == streams.end()) throw std::runtime_error("no paused stream " + std::to_string(id) + " on " + name());
    *ctx = stream_ctx[id];
    return it->second.get();
  }
  void drop(uint64_t id) {
    streams.erase(id);
    stream_ctx.erase(id);
    std::lock_guard<std::mutex> l(stream_mu);
    stream_vm.erase(id);
  }
  bool settled(uint64_t id) {
    HostContext *ctx;
    StreamState *s = paused(id, &ctx);
    return s->rejected || s->continued;
  }
  Response complete(uint64_t id) {
    usable();
    HostContext *ctx;
    StreamState *s = paused(id, &ctx);
    if (!s->rejected && !s->continued)
      throw std::runtime_error("stream " + std::to_string(id) + " is still paused: the plugin has not resumed or answered it");
    auto keep = std::move(streams[id]);
    drop(id);
    if (!s->rejected) forward(ctx);
    Response r = result(s);
    finish(ctx);
    return r;
  }
  void reset(uint64_t id) {
    usable();
    HostContext *ctx;
    paused(id, &ctx);
    auto keep = std::move(streams[id]);
    drop(id);
    finish(ctx);
  }

  // tick fires what is due at the clock's time in the order it fell due, as
  // an event loop fires its timers after a stall: each root context's tick
  // once (no catch-up) and each timed-out HTTP call, a timeout before a tick
  // due at the same instant. Both hosts order them so.
  void tick() {
    usable();
    int64_t now = nowMono();
    struct Due {
      int64_t at;
      bool is_call;
      uint32_t id; // the root context's, or the call's driver-visible id
    };
    std::vector<Due> due;
    for (auto &kv : wasm->timers) {
      if (kv.second.period_ns > 0 && now >= kv.second.next) due.push_back({kv.second.next, false, kv.first});
    }
    {
      std::lock_guard<std::mutex> l(call_mu);
      for (auto &kv : calls) {
        if (kv.second.vm == index && kv.second.deadline_mono > 0 && now >= kv.second.deadline_mono)
          due.push_back({kv.second.deadline_mono, true, kv.first});
      }
    }
    std::sort(due.begin(), due.end(), [](const Due &a, const Due &b) {
      if (a.at != b.at) return a.at < b.at;
      if (a.is_call != b.is_call) return a.is_call;
      return a.id < b.id;
    });
    for (auto &d : due) {
      if (d.is_call) {
        PendingCall c;
        {
          std::lock_guard<std::mutex> l(call_mu);
          auto it = calls.find(d.id);
          if (it == calls.end()) continue; // answered meanwhile
          c = std::move(it->second);
          calls.erase(it);
        }
        Headers h{{":status", "504"}, {"content-length", "24"}, {"content-type", "text/plain"}};
        deliver(c, &h, "upstream request timeout");
        continue;
      }
      auto t = wasm->timers.find(d.id);
      if (t == wasm->timers.end() || t->second.period_ns <= 0) continue;
      t->second.next = now + t->second.period_ns;
      // Envoy's timer calls the root context's onTick, as here.
      if (auto *ctx = wasm->getContext(d.id)) ctx->onTick(0);
      check("proxy_on_tick");
    }
  }

  void deliver(const PendingCall &c, const Headers *headers, std::string_view body) {
    usable();
    auto *ctx = static_cast<HostContext *>(wasm->getContext(c.root_id));
    if (!ctx) return; // the root context is gone: Envoy cancels its calls
    if (headers) {
      ctx->call_headers = headers;
      ctx->call_body = body;
      ctx->onHttpCallResponse(c.token, headers->size(), body.size(), 0);
    } else {
      Headers none;
      ctx->call_headers = nullptr;
      ctx->onHttpCallResponse(c.token, 0, 0, 0);
    }
    ctx->call_headers = nullptr;
    ctx->call_body = {};
    check("proxy_on_http_call_response");
  }
};

HostWasm *HostContext::hw() { return static_cast<HostWasm *>(wasm()); }
int HostContext::vmIndex() { return hw()->worker->index; }
ContextBase *HostWasm::createRootContext(const std::shared_ptr<PluginBase> &p) {
  auto *c = new HostContext(this, p);
  c->vm_index = worker->index;
  return c;
}
HostContext::~HostContext() {
  if (vm_index < 0) return;
  std::lock_guard<std::mutex> l(call_mu);
  for (auto it = calls.begin(); it != calls.end();) {
    if (it->second.vm == vm_index && it->second.root_id == id()) it = calls.erase(it);
    else ++it;
  }
}
void HostContext::error(std::string_view message) {
  hw()->worker->vm_errors += std::string(message) + "\n";
}
void HostWasm::error(std::string_view message) { worker->vm_errors += std::string(message) + "\n"; }
void Integration::error(std::string_view message) { w->vm_errors += std::string(message) + "\n"; }
proxy_wasm::CallOnThreadFunction HostWasm::callOnThreadFunction() {
  Worker *w = worker;
  return [w](const std::function<void()> &f) { w->post(f); };
}

WasmResult HostContext::sendLocalResponse(uint32_t code, std::string_view body, Pairs additional,
                                          proxy_wasm::GrpcStatusCode grpc_status, std::string_view details) {
  if (!stream) return WasmResult::BadArgument;
  if (stream->local_sent) return WasmResult::BadArgument; // one local reply per stream
  stream->local_sent = true;
  // Envoy (Context::sendLocalResponse): StringUtil::replaceAllEmptySpace.
  stream->local_details.assign(details.data(), details.size());
  for (auto &c : stream->local_details)
    if (c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\n' || c == '\r') c = '_';
  Headers extra;
  for (auto &kv : additional) extra.emplace_back(lower(kv.first), std::string(kv.second));
  Worker *w = hw()->worker;
  std::string b(body);
  // Envoy keeps a gRPC status only when it is a known code (0-16); the
  // SDKs' -1 arrives as 0xffffffff and leaves it to the HTTP status.
  int grpc = static_cast<uint32_t>(grpc_status) <= 16 ? static_cast<int>(grpc_status) : -1;
  wasm()->addAfterVmCallAction([w, this, code, b, extra, grpc] { w->applyLocalReply(this, code, b, extra, grpc); });
  return WasmResult::Ok;
}

WasmResult HostContext::httpCall(std::string_view target, const Pairs &headers, std::string_view body,
                                 const Pairs &, int timeout_ms, uint32_t *token_ptr) {
  bool method = false, path = false, authority = false;
  Headers h;
  for (auto &kv : headers) {
    method |= kv.first == ":method";
    path |= kv.first == ":path";
    authority |= kv.first == ":authority";
    h.emplace_back(std::string(kv.first), std::string(kv.second));
  }
  if (!method || !path || !authority) return WasmResult::BadArgument;
  if (!settings.any_cluster) {
    bool known = false;
    for (auto &c : settings.clusters) known |= c == target;
    if (!known) return WasmResult::BadArgument;
  }
  uint32_t token = wasm()->nextHttpCallId();
  PendingCall c{vmIndex(), token, id(), std::string(target), std::move(h), std::string(body),
                timeout_ms > 0 ? nowMono() + int64_t(timeout_ms) * 1000000 : 0};
  {
    std::lock_guard<std::mutex> l(call_mu);
    calls[next_call_id++] = std::move(c);
  }
  *token_ptr = token;
  return WasmResult::Ok;
}

std::string int64le(int64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; i++) s[i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
  return s;
}

std::string marshal(const Headers &h) {
  proxy_wasm::StringPairs p(h.begin(), h.end());
  std::string out(proxy_wasm::PairsUtil::pairsSize(p), '\0');
  proxy_wasm::PairsUtil::marshalPairs(p, out.data(), out.size());
  return out;
}

bool headerValue(const Headers &h, const char *name, std::string *out) {
  for (auto &kv : h) {
    if (kv.first == name) {
      *out = kv.second;
      return true;
    }
  }
  return false;
}

WasmResult HostContext::getProperty(std::string_view path, std::string *result) {
  std::string raw(path);
  if (stream) {
    auto it = set_props.find(raw);
    if (it != set_props.end()) {
      *result = it->second;
      return WasmResult::Ok;
    }
  }
  auto *r = static_cast<HostContext *>(root_context());
  if (r) {
    auto it = r->set_props.find(raw);
    if (it != r->set_props.end()) {
      *result = it->second;
      return WasmResult::Ok;
    }
  }
  if (raw.empty() || (raw.find('\0') == std::string::npos && raw.find('.') != std::string::npos))
    return WasmResult::NotFound; // one element with a dot: Envoy does not split it
  std::string key = raw;
  for (auto &c : key)
    if (c == '\0') c = '.';
  StreamState *s = stream;
  if (s) {
    auto it = s->props.find(key);
    if (it != s->props.end()) {
      *result = it->second;
      return WasmResult::Ok;
    }
    if (key.rfind("request.", 0) == 0) {
      std::string k = key.substr(8);
      if (k == "path") return headerValue(s->req, ":path", result) ? WasmResult::Ok : WasmResult::NotFound;
      if (k == "url_path") {
        if (!headerValue(s->req, ":path", result)) return WasmResult::NotFound;
        auto q = result->find('?');
        if (q != std::string::npos) result->resize(q);
        return WasmResult::Ok;
      }
      if (k == "host") return headerValue(s->req, ":authority", result) ? WasmResult::Ok : WasmResult::NotFound;
      if (k == "scheme") return headerValue(s->req, ":scheme", result) ? WasmResult::Ok : WasmResult::NotFound;
      if (k == "method") return headerValue(s->req, ":method", result) ? WasmResult::Ok : WasmResult::NotFound;
      if (k == "referer") return headerValue(s->req, "referer", result) ? WasmResult::Ok : WasmResult::NotFound;
      if (k == "useragent") return headerValue(s->req, "user-agent", result) ? WasmResult::Ok : WasmResult::NotFound;
      if (k == "id") return headerValue(s->req, "x-request-id", result) ? WasmResult::Ok : WasmResult::NotFound;
      if (k == "protocol") {
        *result = "HTTP/1.1";
        return WasmResult::Ok;
      }
      if (k == "headers") {
        *result = marshal(s->req);
        return WasmResult::Ok;
      }
      if (k == "time") {
        *result = int64le(s->created_ns);
        return WasmResult::Ok;
      }
    }
    if (key == "response.code" && s->has_resp) {
      std::string v;
      if (headerValue(s->resp, ":status", &v)) {
        *result = int64le(atoll(v.c_str()));
        return WasmResult::Ok;
      }
    }
    if (key == "response.headers" && s->has_resp) {
      *result = marshal(s->resp);
      return WasmResult::Ok;
    }
    if (key == "source.port" || key == "destination.port") {
      auto it = s->props.find(key.substr(0, key.size() - 4) + "address");
      if (it != s->props.end()) {
        auto colon = it->second.rfind(':');
        if (colon != std::string::npos) {
          std::string port = it->second.substr(colon + 1);
          char *end = nullptr;
          long long n = strtoll(port.c_str(), &end, 10);
          if (!port.empty() && *end == 0) {
            *result = int64le(n);
            return WasmResult::Ok;
          }
        }
      }
    }
  }
  if (key == "plugin_name") *result = settings.plugin_name;
  else if (key == "plugin_root_id") *result = settings.root_id;
  else if (key == "plugin_vm_id") *result = settings.vm_id;
  else if (key == "node.id") *result = settings.node_id;
  else return WasmResult::NotFound;
  return WasmResult::Ok;
}

proxy_wasm::LogLevel Integration::getLogLevel() {
  return w->prof && w->prof->count ? proxy_wasm::LogLevel::trace : proxy_wasm::LogLevel::info;
}

// trace counts the library's "[vm->host] name(args)" and "[host->vm]
// name(args)" lines while profiling (the "<-" return lines are not counted).
void Integration::trace(std::string_view message) {
  if (!w->prof || !w->prof->count) return;
  for (std::string_view dir : {"vm->host", "host->vm"}) {
    if (message.size() > dir.size() + 3 && message.substr(1, dir.size()) == dir) {
      std::string_view rest = message.substr(dir.size() + 3);
      w->prof->calls[std::string(dir) + " " + std::string(rest.substr(0, rest.find('(')))]++;
    }
  }
}

// ---------------------------------------------------------------- commands

// encodeResponse answers a stream: rejected, status, open (1 paused, 2 held),
// stream id, local reply body and details, upstream request headers (-1:
// none), response headers, the response body that went downstream.
std::string encodeResponse(const Response &r) {
  std::string out = "ok " + std::string(r.rejected ? "1" : "0") + " " + std::to_string(r.status) + " " +
                    (r.paused ? "1" : r.held ? "2" : "0") + " " + std::to_string(r.stream) + " " + esc(r.body) +
                    " " + esc(r.details);
  if (r.forwarded) appendHeaders(out, r.upstream);
  else out += " -1";
  appendHeaders(out, r.resp);
  out += " " + esc(r.down_body);
  return out;
}

Worker &workerOf(int64_t vm) {
  if (vm < 0 || vm >= static_cast<int64_t>(workers.size()))
    throw std::runtime_error("no VM " + std::to_string(vm) + " (there are " + std::to_string(workers.size()) + ")");
  return *workers[vm];
}

// onWorker runs f on VM vm's thread and answers tag with its result.
void onWorker(const std::string &tag, int64_t vm, std::function<std::string(Worker &)> f) {
  Worker &w = workerOf(vm);
  w.post([tag, f, &w] {
    try {
      reply(tag, f(w));
    } catch (const std::exception &e) {
      replyErr(tag, e.what());
    }
  });
}

// runOn posts f to w's thread; the future holds f's error, "" if none.
std::future<std::string> runOn(Worker *w, std::function<void(Worker &)> f) {
  auto p = std::make_shared<std::promise<std::string>>();
  auto fu = p->get_future();
  w->post([p, f, w] {
    try {
      f(*w);
      p->set_value("");
    } catch (const std::exception &e) {
      p->set_value(e.what());
    }
  });
  return fu;
}

// onAll runs f on every VM (concurrently) and waits; the first error wins.
std::string onAll(std::function<void(Worker &)> f) {
  std::vector<std::future<std::string>> fs;
  for (auto &w : workers) fs.push_back(runOn(w.get(), f));
  std::string err;
  for (auto &fu : fs) {
    std::string e = fu.get();
    if (err.empty()) err = e;
  }
  return err;
}

// onEach runs f on every VM's thread in turn, VM 0 first, each after the
// one before it finished; the first error wins. With stop, the first error
// also ends the round (VMs after it do not run f).
std::string onEach(std::function<void(Worker &)> f, bool stop = false) {
  std::string err;
  for (auto &w : workers) {
    std::string e = runOn(w.get(), f).get();
    if (err.empty()) err = e;
    if (stop && !err.empty()) break;
  }
  return err;
}

// drain waits for the answers still due: fan-outs (tick, reconfigure) and
// the work queued on every VM.
std::atomic<int> fanouts{0};
void drain() {
  while (fanouts.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  onAll([](Worker &) {});
}

// readStream reads a stream's arguments: request headers, properties,
// response headers, response trailers, the response body's chunks (a list
// of strings: any bytes), what follows the request (0 the response, 1 a
// reset, 2 a held upstream) and the number of body chunks after which the
// stream is reset (0: none).
std::unique_ptr<StreamState> readStream(Args &a) {
  auto s = std::make_unique<StreamState>();
  s->id = next_stream_id++;
  s->req = a.headers();
  for (auto &kv : a.headers()) s->props[kv.first] = kv.second;
  s->upstream_resp = a.headers();
  s->upstream_trailers = a.headers();
  int64_t chunks = a.num();
  if (chunks < 0 || chunks > 1 << 20) throw std::runtime_error("bad body chunk count");
  for (int64_t i = 0; i < chunks; i++) s->upstream_body.push_back(a.str());
  int64_t after = a.num(); // 1: reset after the request; 2: hold the upstream's answer
  s->reset_after_request = after == 1;
  s->hold_upstream = after == 2;
  s->reset_after_chunks = a.num(); // a reset after that many body chunks (0: none)
  if (s->reset_after_chunks < 0 || s->reset_after_chunks > chunks)
    throw std::runtime_error("a reset after " + std::to_string(s->reset_after_chunks) + " body chunks, of " +
                             std::to_string(chunks));
  return s;
}

std::string substitute(const std::string &v, const std::string &n) {
  std::string out;
  size_t i = 0;
  for (;;) {
    size_t j = v.find("{i}", i);
    if (j == std::string::npos) break;
    out.append(v, i, j - i);
    out += n;
    i = j + 3;
  }
  out.append(v, i, std::string::npos);
  return out;
}

void handle(const std::string &tag, const std::string &cmd, Args &a) {
  if (cmd == "start") {
    if (!workers.empty()) throw std::runtime_error("already started");
    std::string path = a.str(), config = a.str();
    int64_t vms = a.num();
    settings.start_real_ns = a.num();
    settings.node_id = a.str();
    settings.plugin_name = a.str();
    settings.root_id = a.str();
    settings.vm_id = a.str();
    std::unordered_map<std::string, std::string> env;
    for (auto &kv : a.headers()) env[kv.first] = kv.second;
    int64_t nc = a.num();
    settings.any_cluster = nc < 0;
    for (int64_t i = 0; i < nc; i++) settings.clusters.push_back(a.str());
    a.end();
    if (vms < 1 || vms > 64) throw std::runtime_error("VMs must be 1..64");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read the module " + path);
    std::string code((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (int64_t i = 0; i < vms; i++) workers.push_back(std::make_unique<Worker>(i));
    std::string err = onAll([&](Worker &w) {
      try {
        w.start(code, config, env);
      } catch (const std::exception &e) {
        if (w.broken.empty()) w.broken = w.name() + " did not start: " + e.what();
        throw;
      }
    });
    if (!err.empty()) throw std::runtime_error(err);
    reply(tag, "ok");
  } else if (cmd == "http") {
    int64_t vm = a.num();
    auto s = readStream(a);
    a.end();
    auto sp = std::shared_ptr<StreamState>(s.release());
    onWorker(tag, vm, [sp](Worker &w) {
      return encodeResponse(w.http(std::unique_ptr<StreamState>(new StreamState(std::move(*sp)))));
    });
  } else if (cmd == "httpmany") {
    // A batch of full streams run one after another on one VM, answered in
    // one line: the per-stream pipe round trip and thread hand-off are paid
    // once per batch.
    int64_t vm = a.num();
    int64_t n = a.num();
    if (n < 1 || n > 100000) throw std::runtime_error("httpmany takes 1 to 100000 streams");
    auto batch = std::make_shared<std::vector<std::unique_ptr<StreamState>>>();
    batch->reserve(n);
    for (int64_t i = 0; i < n; i++) batch->push_back(readStream(a));
    a.end();
    onWorker(tag, vm, [batch](Worker &w) {
      std::string out = "ok " + std::to_string(batch->size());
      for (auto &s : *batch) {
        std::string r = encodeResponse(w.http(std::move(s)));
        out += ' ';
        out.append(r, 3, std::string::npos);  // without its "ok "
      }
      return out;
    });
  } else if (cmd == "settled" || cmd == "complete" || cmd == "reset") {
    int64_t id = a.num();
    a.end();
    int vm;
    {
      std::lock_guard<std::mutex> l(stream_mu);
      auto it = stream_vm.find(id);
      if (it == stream_vm.end()) throw std::runtime_error("no paused stream " + std::to_string(id));
      vm = it->second;
    }
    onWorker(tag, vm, [cmd, id](Worker &w) -> std::string {
      if (cmd == "settled") return w.settled(id) ? "ok 1" : "ok 0";
      if (cmd == "complete") return encodeResponse(w.complete(id));
      w.reset(id);
      return "ok";
    });
  } else if (cmd == "advance") {
    int64_t d = a.num();
    a.end();
    if (d < 0) throw std::runtime_error("the clock does not go back");
    clock_offset += d;
    reply(tag, "ok");
  } else if (cmd == "tick" || cmd == "reconfigure") {
    std::string config;
    if (cmd == "reconfigure") config = a.str();
    a.end();
    // Fan out without blocking the reader.
    fanouts++;
    std::thread([tag, cmd, config] {
      std::string err;
      // One VM after another, VM 0 first, as the wazero host ticks and
      // updates. Envoy's workers do both concurrently, so no scenario may
      // depend on the order; a comparison of the two hosts needs the same
      // one (a commit can end the old root context, whose on_done acts on
      // shared data).
      if (cmd == "tick") {
        err = onEach([](Worker &w) { w.tick(); });
      } else {
        // The first VM to refuse ends the update, as in the wazero host: the
        // VMs after it never see the configuration.
        err = onEach([config](Worker &w) { w.prepare(config); }, true);
        if (err.empty()) onEach([](Worker &w) { w.commit(); });
        else onEach([](Worker &w) { w.abort(); });
      }
      if (err.empty()) reply(tag, "ok");
      else replyErr(tag, err);
      fanouts--;
    }).detach();
  } else if (cmd == "metric") {
    std::string name = a.str();
    a.end();
    std::lock_guard<std::mutex> l(metric_mu);
    auto it = metric_index.find(name);
    if (it == metric_index.end()) reply(tag, "ok 0 0");
    else reply(tag, "ok 1 " + std::to_string(metrics[it->second].value));
  } else if (cmd == "logs") {
    a.end();
    std::string out = "ok";
    std::lock_guard<std::mutex> l(log_mu);
    out += " " + std::to_string(logs.size());
    for (auto &line : logs) out += " " + esc(line);
    reply(tag, out);
  } else if (cmd == "shsize") {
    a.end();
    auto &sd = proxy_wasm::getGlobalSharedData();
    std::vector<std::string> keys;
    sd.keys(settings.vm_id, &keys);
    size_t bytes = 0;
    for (auto &k : keys) {
      std::pair<std::string, uint32_t> v;
      if (sd.get(settings.vm_id, k, &v) == WasmResult::Ok) bytes += k.size() + v.first.size();
    }
    reply(tag, "ok " + std::to_string(keys.size()) + " " + std::to_string(bytes));
  } else if (cmd == "shget") {
    std::string key = a.str();
    a.end();
    std::pair<std::string, uint32_t> v;
    if (proxy_wasm::getGlobalSharedData().get(settings.vm_id, key, &v) == WasmResult::Ok)
      reply(tag, "ok 1 " + esc(v.first));
    else reply(tag, "ok 0 %");
  } else if (cmd == "pending") {
    a.end();
    std::string out = "ok";
    std::lock_guard<std::mutex> l(call_mu);
    out += " " + std::to_string(calls.size());
    for (auto &kv : calls) {
      out += " " + std::to_string(kv.first) + " " + std::to_string(kv.second.vm) + " " + esc(kv.second.cluster);
      appendHeaders(out, kv.second.headers);
      out += " " + esc(kv.second.body);
    }
    reply(tag, out);
  } else if (cmd == "respond" || cmd == "fail") {
    int64_t id = a.num();
    Headers h;
    std::string body;
    if (cmd == "respond") {
      h = a.headers();
      body = a.str();
    }
    a.end();
    PendingCall c;
    {
      std::lock_guard<std::mutex> l(call_mu);
      auto it = calls.find(id);
      if (it == calls.end()) throw std::runtime_error("no pending call " + std::to_string(id));
      c = it->second;
      calls.erase(it);
    }
    bool fail = cmd == "fail";
    onWorker(tag, c.vm, [c, h, body, fail](Worker &w) {
      w.deliver(c, fail ? nullptr : &h, body);
      return std::string("ok");
    });
  } else if (cmd == "bench") {
    int64_t vm = a.num(), first = a.num(), n = a.num();
    auto s = readStream(a);
    a.end();
    auto tmpl = std::shared_ptr<StreamState>(s.release());
    onWorker(tag, vm, [tmpl, first, n](Worker &w) {
      bool subst = false;
      for (auto &kv : tmpl->req) subst |= kv.second.find("{i}") != std::string::npos;
      for (auto &kv : tmpl->props) subst |= kv.second.find("{i}") != std::string::npos;
      int64_t rejected = 0;
      int64_t cpu0 = threadCPU();
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < n; i++) {
        auto st = std::make_unique<StreamState>();
        st->id = next_stream_id++;
        st->req = tmpl->req;
        st->props = tmpl->props;
        st->upstream_resp = tmpl->upstream_resp;
        st->upstream_body = tmpl->upstream_body;
        if (subst) {
          std::string num = std::to_string(first + i);
          for (auto &kv : st->req) kv.second = substitute(kv.second, num);
          for (auto &kv : st->props) kv.second = substitute(kv.second, num);
        }
        Response r = w.http(std::move(st), false);
        rejected += r.rejected;
      }
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      int64_t cpu = threadCPU() - cpu0;
      return "ok " + std::to_string(ns) + " " + std::to_string(rejected) + " " + std::to_string(cpu);
    });
  } else if (cmd == "profile") {
    // Like bench, and answers the time in each stream callback; with count
    // 1, runs the n streams again with tracing on and adds the crossings.
    int64_t vm = a.num(), first = a.num(), n = a.num(), count = a.num();
    auto s = readStream(a);
    a.end();
    auto tmpl = std::shared_ptr<StreamState>(s.release());
    onWorker(tag, vm, [tmpl, first, n, count](Worker &w) {
      Profile timed, counted;
      counted.count = true;
      for (int pass = 0; pass < (count ? 2 : 1); pass++) {
        w.prof = pass == 0 ? &timed : &counted;
        try {
          for (int64_t i = 0; i < n; i++) {
            auto st = std::make_unique<StreamState>();
            st->id = next_stream_id++;
            st->req = tmpl->req;
            st->props = tmpl->props;
            st->upstream_resp = tmpl->upstream_resp;
            st->upstream_body = tmpl->upstream_body;
            std::string num = std::to_string(first + pass * n + i);
            for (auto &kv : st->req) kv.second = substitute(kv.second, num);
            for (auto &kv : st->props) kv.second = substitute(kv.second, num);
            w.http(std::move(st), false);
          }
        } catch (...) {
          w.prof = nullptr;
          throw;
        }
        w.prof = nullptr;
      }
      std::string out = "ok";
      for (int c = 0; c < kCallbacks; c++) out += " " + std::to_string(timed.ns[c]);
      out += " " + std::to_string(counted.calls.size());
      for (auto &kv : counted.calls) out += " " + esc(kv.first) + " " + std::to_string(kv.second);
      return out;
    });
  } else if (cmd == "close") {
    a.end();
    drain();
    reply(tag, "ok");
    _exit(0);
  } else {
    throw std::runtime_error("unknown command " + cmd);
  }
}

} // namespace

int main() {
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    Tokens t = split(line);
    if (t.empty()) continue;
    std::string tag = t[0];
    if (t.size() < 2) {
      replyErr(tag, "no command");
      continue;
    }
    Args a{t, 2};
    try {
      handle(tag, t[1], a);
    } catch (const std::exception &e) {
      replyErr(tag, e.what());
    }
  }
  drain();
  _exit(0);
}
