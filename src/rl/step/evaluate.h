// Evaluation of a policy on a prompt dataset: generate n samples per prompt with the eval sampling
// settings, grade them with the run's reward, and summarise (accuracy, pass@n, format accuracy,
// mean length, truncation). Used by `rlcpp eval`, the demo's before/after and the evaluation
// during training.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "io/prompt_dataset.h"
#include "reward/reward_function.h"
#include "rl/config/run_config.h"
#include "rl/rollout/model_reward.h"
#include "text/prompt_builder.h"

namespace rlcpp {

// How evaluate() samples: the sampling settings (stop tokens included), samples per prompt, the
// first prompts only, and the seed.
struct EvalSampling {
  SamplingParams sampling;  // stop tokens included
  int64_t n = 1;            // samples per prompt
  int64_t limit = 0;        // first N prompts (0: all)
  uint64_t seed = 0;
  const Agent* agent = nullptr;  // multi-turn: prompts run as episodes; the reward grades the last turn
};

struct EvalSample {
  int64_t line = 0;
  std::string prompt, response, gt_answer, extracted;
  std::string reason;  // the grader's, where it gives one (code rewards)
  double reward = 0;
  bool correct = false, format_ok = false, truncated = false;
  int64_t tokens = 0;
  nlohmann::json episode;  // multi-turn: the episode's summary (its turns, tool calls, ...)
};

struct EvalResult {
  int64_t prompts = 0, samples = 0;
  double accuracy = 0;          // correct samples / samples
  double pass_at_n = 0;         // prompts with a correct sample / prompts
  double maj_at_n = 0;          // prompts whose most frequent extracted answer is correct / prompts
  double format_accuracy = 0;   // samples with an extractable answer / samples
  double reward_mean = 0;
  double response_length_mean = 0;
  double truncated_fraction = 0;
  // Multi-turn: samples that called a tool at least once / samples, tool calls and turns per sample.
  bool multi_turn = false;
  double tool_call_rate = 0, tool_calls_mean = 0, turns_mean = 0;
  int64_t tito_mismatch = 0;
  double seconds = 0;
  std::vector<EvalSample> per_sample;
  nlohmann::ordered_json summary() const;
};

EvalResult evaluate(Engine& engine, PromptBuilder& prompts, const PromptDataset& dataset, const RewardFunction& reward,
                    const EvalSampling& options);

// One JSON line per sample (prompt, response, answer, correctness, ...).
std::string eval_samples_jsonl(const EvalResult& result);

// Evaluation during training (-ed, -ei): every eval set with the run's eval sampling settings,
// graded with the run's reward type.
class RunEvaluator {
 public:
  // Per-sample files go to --eval-save-dir/<project>/<set>/step-<n>.jsonl, by default
  // run_dir/eval/<set>/step-<n>.jsonl.
  // `reward_model_scorer`: where a reward model's scores come from (a reward rank), or empty: the
  // model is loaded here.
  RunEvaluator(const RunConfig& config, const ModelConfig& model_config, const Tokenizer& tokenizer,
               const std::filesystem::path& run_dir, RowScorer reward_model_scorer = {});
  ~RunEvaluator();
  bool empty() const { return sets_.empty(); }
  // Every -ei steps and at the end of the run.
  bool due(int64_t step, int64_t total_steps) const;
  // Evaluates every set with the engine's current weights: {"<set>": {accuracy, pass_at_n, ...}}.
  nlohmann::ordered_json run(Engine& engine, int64_t step);
  // When due: run() into extra["eval"]; returns the seconds it took (0 when not due). Under tensor
  // parallelism the engine's followers serve it (serve_evaluation_if_due) until it is done.
  double run_if_due(Engine* engine, int64_t step, int64_t total_steps, nlohmann::ordered_json& extra);

 private:
  const RunConfig& c_;
  std::filesystem::path out_dir_;
  std::vector<std::pair<std::string, PromptDataset>> sets_;
  std::unique_ptr<PromptBuilder> prompts_;
  RewardFunction reward_;
  std::unique_ptr<SandboxPool> tool_sandbox_;
  std::unique_ptr<Agent> agent_;
  EvalSampling options_;
};

// Whether a run of `config` evaluates after `step`: RunEvaluator::due, for the ranks that hold no
// evaluator (they load no eval sets).
bool evaluation_due(const EvalOptions& eval, int64_t step, int64_t total_steps);
// On a follower of a tensor-parallel engine: serves the evaluation its first rank runs, when due.
void serve_evaluation_if_due(Engine& engine, const EvalOptions& eval, int64_t step, int64_t total_steps);

}  // namespace rlcpp
