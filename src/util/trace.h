// Profiling spans as a Chrome trace (the JSON that Perfetto and chrome://tracing open): "X"
// (complete) events with the phase's name, start and duration in microseconds, this process's
// rank as pid and a small thread number as tid. Off unless enable() is called (--profile-dir);
// a disabled span costs one branch.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

namespace rlcpp::trace {

// Starts recording; write() puts the events in `file` (process `pid`, shown as `process_name`).
void enable(const std::filesystem::path& file, int pid, const std::string& process_name);
bool enabled();
// Writes every event so far (again, whole): at checkpoints and at the end of a run.
void write();

// A span from construction to destruction; spans on one thread nest.
class Span {
 public:
  explicit Span(const char* name, const char* category = "rlcpp")
      : name_(name), category_(category), active_(enabled()) {
    if (active_) start_ = std::chrono::steady_clock::now();
  }
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* category_;
  bool active_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace rlcpp::trace
