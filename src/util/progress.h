// A live status line at the bottom of a terminal: the run's step and ETA, and the current phase
// with its bar (generate: sequences done of total and tokens/s; logprobs and train: micro-batches).
// Drawn on stderr only when stderr is a terminal (TERM not "dumb", RLCPP_PROGRESS not 0); log
// lines go above it. Anywhere else every call is a no-op and the output stays plain lines.
#pragma once

#include <cstdint>
#include <string>

namespace rlcpp::progress {

bool enabled();
// The run's position: step `step` of `total` (shown with an ETA once `eta_seconds` >= 0).
void run(int64_t step, int64_t total, double eta_seconds);
// The current phase: `done` of `total` units, with an optional detail ("1520 tok/s").
void phase(const char* name, int64_t done, int64_t total, const std::string& detail = {});
void end_phase();
// Erases the line (before other output) and draws it again.
void clear();
void redraw();

}  // namespace rlcpp::progress
