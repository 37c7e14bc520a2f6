// What one RL step reports: a line of metrics.jsonl and the console line, the same fields in the
// colocated and the distributed mode (which adds staleness and weight-sync figures).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "io/tfevents.h"
#include "comm/mpi.h"
#include "rl/rollout/rollout.h"
#include "rl/config/run_config.h"

namespace rlcpp {

struct StepRecord {
  int64_t step = 0, total_steps = 0, episode = 0;
  int64_t kept_groups = 0;                         // trained on this step
  int64_t generated_groups = 0, round_kept_groups = 0;  // by the rounds since the last step
  int64_t buffered_groups = 0;                     // kept, left for later steps
  int64_t optimizer_steps = 0, policy_version = 0;
  RolloutStats stats;                              // trained and filtered-out groups
  std::map<std::string, double> train;             // update_policy's metrics
  std::vector<std::pair<std::string, double>> time;  // seconds by phase, "total" last
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // mode-specific figures
};

// The metrics.jsonl line.
nlohmann::ordered_json to_json(const StepRecord& record);
// The console line.
std::string console_line(const StepRecord& record);

// Where a run's step records go: a line of run_dir/metrics.jsonl each, every number in it as a
// TensorBoard scalar (run_dir/events.out.tfevents.*, tags by path: "time/train",
// "eval/gsm8k/accuracy"), a console line every --log-interval steps and at the last step, and the
// terminal's progress line (ETA at the pace of the steps written so far). metrics.jsonl ends with
// the run's status line, {"status": "finished" | "failed", "steps": the last step written, "error"}:
// finish() writes it for a run that did what was asked, fail() or the destructor for one ended by
// an error (a process killed writes none; a resume moves any status line to metrics.discarded.jsonl).
class RunLog {
 public:
  // A fresh run, or one resumed after `resumed_step` (metrics.jsonl is rewound to it, and
  // TensorBoard told to drop what earlier files hold from the next step on).
  RunLog(const std::filesystem::path& run_dir, const RunConfig& config, std::optional<int64_t> resumed_step);
  ~RunLog();
  void write(const StepRecord& record);
  // Any other run's line (SFT): metrics.jsonl and TensorBoard; `console` at the log interval.
  void write(const nlohmann::ordered_json& line, int64_t total_steps, const std::string& console);
  void finish();
  void fail(const std::string& error);

 private:
  void write_status(const char* status, const std::string& error);

  const RunConfig& c_;
  std::ofstream metrics_;
  std::unique_ptr<EventWriter> events_;
  int64_t steps_written_ = 0, last_step_ = 0;
  bool ended_ = false;  // the status line is written
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  CommunicationBytes communicated_;  // this process's MPI bytes at the last line
};

// Whether step `step` of `total_steps` writes a checkpoint (-si, and always the last step) and a
// rollouts file (-rsd every --rollout-save-interval steps).
bool checkpoint_due(const LoggingOptions& logging, int64_t step, int64_t total_steps);
bool rollouts_due(const LoggingOptions& logging, int64_t step);

// Dynamic batching that ran out of rounds: a warning with the counts, or (--require-full-batch) a
// UserError. `groups`: what the step will train on, of `wanted`.
void short_batch(const AlgoConfig& algo, int64_t step, int64_t groups, int64_t wanted);

// --profile-dir: starts the Chrome trace of this process (rank `rank`, shown as `role`).
void start_profile(const LoggingOptions& logging, int rank, const std::string& role);

// Seconds left at the mean pace of the steps done so far.
double eta_seconds(double elapsed, int64_t steps_done, int64_t steps_left);

// Every number of a metrics line as a scalar, tagged by its path; "step" is the step.
void write_scalars(EventWriter& events, const nlohmann::ordered_json& line);

// Writes DIR/step-N.jsonl: one line per sample of the trained and the filtered-out groups.
void save_rollouts(const std::filesystem::path& dir, int64_t step, const std::vector<SampleGroup>& trained,
                   const std::vector<SampleGroup>& discarded);

}  // namespace rlcpp
