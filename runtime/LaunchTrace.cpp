#include "runtime/LaunchTrace.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/Driver.h"

namespace tilejit {
namespace {

struct Entry {
  std::string kind, name, grid;
  CUevent start = nullptr, end = nullptr;
};

struct Trace {
  std::mutex mu;
  std::atomic<bool> on{false};
  std::string path;  // guarded by mu
  std::unordered_map<CUfunction, std::string> names;
  std::vector<Entry> entries;
};

Trace& trace() {
  static Trace* t = [] {
    auto* t = new Trace();  // never destroyed: launches may run during static destruction
    if (const char* p = std::getenv("TILEJIT_LAUNCH_TRACE"); p && *p) {
      t->path = p;
      t->on = true;
    }
    return t;
  }();
  return *t;
}

// Writes `s` as a JSON string (names are identifiers and labels: quotes and backslashes escaped).
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Appends an entry whose start event is recorded on `stream` now (and an end event to record
// later, when `with_end`); returns its index. Tracing is on.
int record_entry(std::string kind, std::string name, std::string grid, CUstream stream,
                 bool with_end) {
  Driver& d = *Driver::get();
  Trace& t = trace();
  std::lock_guard lock(t.mu);
  Entry e{std::move(kind), std::move(name), std::move(grid)};
  e.start = d.event_create();
  if (with_end) e.end = d.event_create();
  d.event_record(e.start, stream);
  t.entries.push_back(std::move(e));
  return static_cast<int>(t.entries.size()) - 1;
}

std::string traced_name(CUfunction function) {
  Trace& t = trace();
  std::lock_guard lock(t.mu);
  auto it = t.names.find(function);
  return it != t.names.end() ? it->second : fmt::format("{}", static_cast<void*>(function));
}

}  // namespace

bool launch_trace_enabled() { return trace().on.load(std::memory_order_relaxed); }

void start_launch_trace(const std::string& path) {
  Trace& t = trace();
  std::lock_guard lock(t.mu);
  t.path = path;
  t.on = !path.empty();
}

void name_traced_function(CUfunction function, const std::string& name) {
  std::lock_guard lock(trace().mu);  // (always: tracing may start later)
  trace().names[function] = name;
}

TracedLaunchScope::TracedLaunchScope(CUfunction function, Dim3 grid, CUstream stream)
    : stream_(stream) {
  if (launch_trace_enabled())
    index_ = record_entry("kernel", traced_name(function), to_string(grid), stream, true);
}

TracedLaunchScope::~TracedLaunchScope() {
  if (index_ < 0) return;
  Trace& t = trace();
  std::lock_guard lock(t.mu);
  Driver::get()->event_record(t.entries[size_t(index_)].end, stream_);
}

void mark_launch_trace(const std::string& name, CUstream stream) {
  if (launch_trace_enabled()) record_entry("marker", name, "", stream, false);
}

void flush_launch_trace() {
  if (!launch_trace_enabled()) return;
  Driver& d = *Driver::get();
  d.context_synchronize();
  Trace& t = trace();
  std::lock_guard lock(t.mu);
  if (t.entries.empty()) return;
  std::FILE* f = std::fopen(t.path.c_str(), "a");
  const CUevent origin = t.entries.front().start;
  for (const Entry& e : t.entries) {
    const double start = d.event_elapsed_ms(origin, e.start);
    const double end = e.end ? d.event_elapsed_ms(origin, e.end) : start;
    if (f)
      std::fprintf(f, "%s\n",
                   fmt::format("{{\"kind\": \"{}\", \"name\": {}, \"grid\": \"{}\", \"start_ms\": "
                               "{:.4f}, \"end_ms\": {:.4f}}}",
                               e.kind, json_string(e.name), e.grid, start, end)
                       .c_str());
  }
  for (const Entry& e : t.entries) {
    d.event_destroy(e.start);
    if (e.end) d.event_destroy(e.end);
  }
  t.entries.clear();
  if (f) std::fclose(f);
  TILEJIT_USER_CHECK(f, "cannot append the launch trace to {}", t.path);
}

}  // namespace tilejit
