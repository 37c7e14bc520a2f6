#include "rl/rollout/rollout.h"

#include <chrono>
#include <optional>
#include <numeric>

#include "algo/advantages.h"
#include "algo/dapo.h"
#include "reward/external.h"
#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<SampleGroup> take_groups(std::deque<SampleGroup>& buffer, int64_t n) {
  std::vector<SampleGroup> batch;
  while (!buffer.empty() && static_cast<int64_t>(batch.size()) < n) {
    batch.push_back(std::move(buffer.front()));
    buffer.pop_front();
  }
  return batch;
}

DatasetOptions checked_by(const RewardFunction& reward, DatasetOptions options) {
  options.check = [&reward](const PromptRecord& record) {
    reward.check_record(record.gt_answer, nlohmann::json(record.metadata));
  };
  return options;
}

nlohmann::json to_json(const PromptPick& p) {
  return {{"ids", p.ids}, {"text", p.text}, {"gt_answer", p.gt_answer}, {"line", p.line},
          {"seed", p.seed}, {"id", p.id}, {"metadata", p.metadata}};
}

PromptPick pick_from_json(const nlohmann::json& j) {
  return {j.at("ids").get<std::vector<int32_t>>(), j.at("text").get<std::string>(), j.at("gt_answer").get<std::string>(),
          j.at("line").get<int64_t>(), j.at("seed").get<uint64_t>(), j.value("id", int64_t{0}),
          j.value("metadata", nlohmann::json::object())};
}

EngineConfig run_engine_config(const RunConfig& c) {
  EngineConfig config = c.rollout.engine;
  config.weights_dtype = dtype_or_default(c.rollout.dtype, "--rollout-dtype");
  config.kv_dtype = dtype_or_default(c.rollout.kv_cache_dtype, "--kv-cache-dtype");
  return config;
}

PromptOptions run_prompt_options(const RunConfig& c, const ModelConfig& model_config) {
  PromptOptions options;
  options.system_prompt = c.rollout.system_prompt ? *c.rollout.system_prompt : default_system_prompt(c.reward.type);
  options.max_prompt_tokens = c.rollout.max_prompt_tokens;
  options.context_tokens = model_config.max_position_embeddings;
  options.overflow = c.rollout.overflow;
  options.source = c.runtime.dataset;
  return options;
}

RolloutGenerator::RolloutGenerator(const RunConfig& config, const ModelConfig& model_config, const Tokenizer& tokenizer,
                                   RolloutBackend* backend, const PromptDataset* dataset, DatasetCursor* cursor,
                                   const RewardFunction* reward)
    : c_(config), backend_(backend), dataset_(dataset), cursor_(cursor), reward_(reward) {
  prompts_ = std::make_unique<PromptBuilder>(tokenizer, run_prompt_options(config, model_config));
  sampling_ = config.rollout.sampling;
  sampling_.stop_token_ids = default_stop_tokens(model_config, tokenizer);
}

std::vector<PromptPick> RolloutGenerator::pick(int64_t n_prompts) {
  RLCPP_CHECK(dataset_ != nullptr && cursor_ != nullptr, "picking prompts without a dataset");
  std::vector<PromptPick> picks;
  const int64_t n_records = static_cast<int64_t>(dataset_->records.size());
  int64_t draws = 0;
  while (static_cast<int64_t>(picks.size()) < n_prompts) {
    if (++draws > 2 * n_records + n_prompts && picks.empty()) {
      throw_user_error("{}: every prompt is left out by the prompt-length limits (-mpt {}, min_prompt_length {})",
                       c_.runtime.dataset, c_.rollout.max_prompt_tokens, c_.rollout.min_prompt_length);
    }
    const PromptRecord& record = dataset_->records[static_cast<size_t>(cursor_->next())];
    auto built = prompts_->build(record);
    if (!built) {
      ++skipped_long_;
      continue;
    }
    if (static_cast<int64_t>(built->ids.size()) < c_.rollout.min_prompt_length) {
      ++skipped_short_;
      continue;
    }
    const int64_t position = static_cast<int64_t>(cursor_->consumed());
    picks.push_back({built->ids, built->text, record.gt_answer, record.line,
                     c_.runtime.seed * 1000003ULL + static_cast<uint64_t>(position), position,
                     nlohmann::json(record.metadata)});
  }
  return picks;
}

RolloutRound RolloutGenerator::generate(const std::vector<PromptPick>& picks) {
  RLCPP_CHECK(backend_ != nullptr && reward_ != nullptr, "generating without a rollout backend");
  RolloutRound round;
  std::vector<GenerationRequest> requests;
  std::vector<SampleGroup> groups;
  for (const auto& pick : picks) {
    GenerationRequest request;
    request.prompt_ids = pick.ids;
    request.params = sampling_;
    request.n = c_.rollout.num_generations;
    request.seed = pick.seed;
    requests.push_back(std::move(request));
    SampleGroup group;
    group.id = pick.id;
    group.prompt = pick.text;
    group.gt_answer = pick.gt_answer;
    group.line = pick.line;
    groups.push_back(std::move(group));
  }
  // Generation, in calls of inference_microbatch_size prompts; ranking sorts them by length first.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  if (c_.rollout.ranking) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return requests[a].prompt_ids.size() < requests[b].prompt_ids.size(); });
  }
  const size_t per_call = c_.rollout.inference_microbatch_size > 0 ? static_cast<size_t>(c_.rollout.inference_microbatch_size) : order.size();
  const int64_t G = c_.rollout.num_generations;
  std::vector<std::vector<GeneratedSample>> by_request(requests.size(), std::vector<GeneratedSample>(static_cast<size_t>(G)));
  auto t0 = std::chrono::steady_clock::now();
  std::optional<trace::Span> span(std::in_place, "generate");
  for (size_t begin = 0; begin < order.size(); begin += per_call) {
    std::vector<GenerationRequest> call;
    for (size_t k = begin; k < std::min(order.size(), begin + per_call); ++k) call.push_back(requests[order[k]]);
    for (auto& s : backend_->generate(call)) {
      const size_t r = order[begin + static_cast<size_t>(s.request)];
      by_request[r][static_cast<size_t>(s.sample)] = std::move(s);
    }
  }
  round.generate_seconds = seconds_since(t0);
  span.emplace("reward");
  // Rewards (with DAPO's over-length shaping), advantages over the round, the group filter.
  t0 = std::chrono::steady_clock::now();
  std::vector<RewardInput> inputs;
  for (size_t r = 0; r < requests.size(); ++r) {
    for (const auto& s : by_request[r]) {
      inputs.push_back({groups[r].prompt, s.text, groups[r].gt_answer, picks[r].metadata,
                        s.finish_reason == FinishReason::kLength});
    }
  }
  const auto graded = reward_->score(inputs);
  round.reward_seconds = seconds_since(t0);
  span.reset();
  std::vector<double> rewards(graded.size());
  std::vector<int64_t> correct(graded.size());  // int64: the group filter's tensor
  const int64_t cache = c_.algo.overlong_cache > 0 ? c_.algo.overlong_cache : default_overlong_cache(sampling_.max_new_tokens);
  for (size_t k = 0; k < graded.size(); ++k) {
    const auto& s = by_request[k / static_cast<size_t>(G)][k % static_cast<size_t>(G)];
    rewards[k] = graded[k].reward;
    if (c_.algo.overlong_shaping) {
      rewards[k] += overlong_penalty(static_cast<int64_t>(s.token_ids.size()), sampling_.max_new_tokens, cache,
                                     c_.reward.scale.correct);
    }
    correct[k] = graded[k].correct;
  }
  const auto advantages = compute_advantages(torch::tensor(rewards, torch::kFloat64), G, c_.algo.advantage);
  const auto* adv = advantages.data_ptr<double>();
  torch::Tensor keep;
  if (c_.algo.filter_range) {
    keep = filter_groups_by_accuracy(torch::tensor(correct).to(torch::kBool), G, c_.algo.filter_range->first,
                                     c_.algo.filter_range->second);
  }
  for (size_t r = 0; r < requests.size(); ++r) {
    SampleGroup& g = groups[r];
    for (int64_t s = 0; s < G; ++s) {
      const size_t k = r * static_cast<size_t>(G) + static_cast<size_t>(s);
      auto& generated = by_request[r][static_cast<size_t>(s)];
      Sample sample = model_sample(requests[r].prompt_ids, std::move(generated.token_ids), adv[k],
                                   std::move(generated.logprobs), generated.policy_version,
                                   generated.finish_reason == FinishReason::kLength);
      sample.response = std::move(generated.text);
      sample.reward = rewards[k];
      sample.reward_parts = graded[k].parts;
      sample.reward_reason = graded[k].reason;
      sample.correct = correct[k] != 0;
      sample.group_id = g.id;
      g.samples.push_back(std::move(sample));
    }
    const bool kept = !keep.defined() || keep[static_cast<int64_t>(r)].item<bool>();
    (kept ? round.kept : round.discarded).push_back(std::move(g));
  }
  return round;
}


}  // namespace rlcpp
