#include "util/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rlcpp::progress {

namespace {

struct State {
  std::mutex mutex;
  int64_t step = 0, total = 0;
  double eta = -1;
  std::string phase, detail;
  int64_t done = 0, units = 0;
  bool shown = false;
  std::chrono::steady_clock::time_point last_draw;
};

State& state() {
  static State s;
  return s;
}

std::string duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

void draw(State& s) {
  std::string line;
  if (s.total > 0) {
    line = fmt::format("step {}/{}", s.step, s.total);
    if (s.eta >= 0) line += " ETA " + duration(s.eta);
  }
  if (!s.phase.empty()) {
    constexpr int kWidth = 24;
    const int filled = s.units > 0 ? static_cast<int>(kWidth * s.done / s.units) : 0;
    line += fmt::format("{}{} [{}{}] {}/{}", line.empty() ? "" : " | ", s.phase, std::string(static_cast<size_t>(filled), '#'),
                        std::string(static_cast<size_t>(kWidth - filled), '.'), s.done, s.units);
    if (!s.detail.empty()) line += " " + s.detail;
  }
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  s.shown = !line.empty();
  s.last_draw = std::chrono::steady_clock::now();
}

void erase(State& s) {
  if (!s.shown) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  s.shown = false;
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* term = std::getenv("TERM");
    const char* setting = std::getenv("RLCPP_PROGRESS");
    if (setting != nullptr && std::strcmp(setting, "0") == 0) return false;
    return ::isatty(STDERR_FILENO) == 1 && (term == nullptr || std::strcmp(term, "dumb") != 0);
  }();
  return on;
}

void run(int64_t step, int64_t total, double eta_seconds) {
  if (!enabled()) return;
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.step = step, s.total = total, s.eta = eta_seconds;
  draw(s);
}

void phase(const char* name, int64_t done, int64_t total, const std::string& detail) {
  if (!enabled()) return;
  auto& s = state();
  std::lock_guard lock(s.mutex);
  const bool changed = s.phase != name;
  s.phase = name, s.done = done, s.units = total, s.detail = detail;
  // At most ten redraws a second, but always the first and the last of a phase.
  if (changed || done >= total || std::chrono::steady_clock::now() - s.last_draw > std::chrono::milliseconds(100)) draw(s);
}

void end_phase() {
  if (!enabled()) return;
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.phase.clear();
  draw(s);
}

void clear() {
  if (!enabled()) return;
  auto& s = state();
  std::lock_guard lock(s.mutex);
  erase(s);
}

void redraw() {
  if (!enabled()) return;
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (s.total > 0 || !s.phase.empty()) draw(s);
}

}  // namespace rlcpp::progress
