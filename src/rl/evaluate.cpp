#include "rl/evaluate.h"

#include <chrono>

namespace rlcpp {

nlohmann::ordered_json EvalResult::summary() const {
  return {{"prompts", prompts},         {"samples", samples},
          {"accuracy", accuracy},       {"pass_at_n", pass_at_n},
          {"format_accuracy", format_accuracy}, {"reward_mean", reward_mean},
          {"response_length_mean", response_length_mean}, {"truncated_fraction", truncated_fraction},
          {"seconds", seconds}};
}

EvalResult evaluate(Engine& engine, PromptBuilder& prompts, const PromptDataset& dataset, const RewardFunction& reward,
                    const EvalOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<GenerationRequest> requests;
  std::vector<const PromptRecord*> records;
  std::vector<std::string> texts;
  for (const auto& record : dataset.records) {
    if (options.limit > 0 && static_cast<int64_t>(requests.size()) >= options.limit) break;
    auto built = prompts.build(record);
    if (!built) continue;
    GenerationRequest request;
    request.prompt_ids = built->ids;
    request.params = options.sampling;
    request.n = options.n;
    request.seed = options.seed * 1000003ULL + static_cast<uint64_t>(record.line);
    requests.push_back(std::move(request));
    records.push_back(&record);
    texts.push_back(built->text);
  }
  const auto generated = engine.generate(requests);
  std::vector<RewardInput> inputs;
  for (const auto& s : generated) {
    const auto& record = *records[static_cast<size_t>(s.request)];
    inputs.push_back({texts[static_cast<size_t>(s.request)], s.text, record.gt_answer, nlohmann::json(record.metadata),
                      s.finish_reason == FinishReason::kLength});
  }
  const auto graded = reward.score(inputs);
  EvalResult r;
  r.prompts = static_cast<int64_t>(requests.size());
  r.samples = static_cast<int64_t>(generated.size());
  std::vector<uint8_t> solved(requests.size(), 0);
  for (size_t k = 0; k < generated.size(); ++k) {
    const auto& s = generated[k];
    EvalSample e;
    e.line = records[static_cast<size_t>(s.request)]->line;
    e.prompt = inputs[k].prompt;
    e.response = s.text;
    e.gt_answer = inputs[k].gt_answer;
    e.extracted = graded[k].extracted.value_or("");
    e.reward = graded[k].reward;
    e.correct = graded[k].correct;
    e.format_ok = graded[k].format_ok;
    e.truncated = inputs[k].truncated;
    e.tokens = static_cast<int64_t>(s.token_ids.size());
    solved[static_cast<size_t>(s.request)] |= e.correct;
    r.accuracy += e.correct;
    r.format_accuracy += e.format_ok;
    r.reward_mean += e.reward;
    r.response_length_mean += static_cast<double>(e.tokens);
    r.truncated_fraction += e.truncated;
    r.per_sample.push_back(std::move(e));
  }
  const double n = std::max<double>(1.0, static_cast<double>(r.samples));
  r.accuracy /= n;
  r.format_accuracy /= n;
  r.reward_mean /= n;
  r.response_length_mean /= n;
  r.truncated_fraction /= n;
  for (uint8_t v : solved) r.pass_at_n += v;
  r.pass_at_n /= std::max<double>(1.0, static_cast<double>(r.prompts));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace rlcpp
