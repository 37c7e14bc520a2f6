#include "util/trace.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "util/file.h"

namespace rlcpp::trace {

namespace {

struct Event {
  const char* name;
  const char* category;
  int64_t start_us, duration_us;
  int tid;
};

struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::filesystem::path file;
  int pid = 0;
  std::string process_name;
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  std::vector<Event> events;
  std::map<std::thread::id, int> threads;
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

}  // namespace

void enable(const std::filesystem::path& file, int pid, const std::string& process_name) {
  auto& r = recorder();
  std::lock_guard lock(r.mutex);
  r.file = file;
  r.pid = pid;
  r.process_name = process_name;
  r.on = true;
}

bool enabled() { return recorder().on.load(std::memory_order_relaxed); }

Span::~Span() {
  if (!active_) return;
  const auto end = std::chrono::steady_clock::now();
  auto& r = recorder();
  std::lock_guard lock(r.mutex);
  auto [it, added] = r.threads.emplace(std::this_thread::get_id(), static_cast<int>(r.threads.size()));
  (void)added;
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  r.events.push_back({name_, category_, duration_cast<microseconds>(start_ - r.origin).count(),
                      duration_cast<microseconds>(end - start_).count(), it->second});
}

void write() {
  auto& r = recorder();
  if (!r.on) return;
  nlohmann::json events = nlohmann::json::array();
  {
    std::lock_guard lock(r.mutex);
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r.pid}, {"args", {{"name", r.process_name}}}});
    for (const auto& e : r.events) {
      events.push_back({{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", e.start_us}, {"dur", e.duration_us},
                        {"pid", r.pid}, {"tid", e.tid}});
    }
  }
  std::filesystem::create_directories(r.file.parent_path());
  // The origin on the steady clock (CLOCK_MONOTONIC), so that other tools' timestamps (perf record
  // -k CLOCK_MONOTONIC) can be placed in the spans.
  const auto origin_us = std::chrono::duration_cast<std::chrono::microseconds>(r.origin.time_since_epoch()).count();
  write_file_atomic(r.file, nlohmann::json({{"traceEvents", events}, {"displayTimeUnit", "ms"},
                                            {"otherData", {{"steady_clock_origin_us", origin_us}}}})
                                    .dump() +
                                "\n");
}

}  // namespace rlcpp::trace
