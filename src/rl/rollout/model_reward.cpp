#include "rl/rollout/model_reward.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>

#include "model/lora.h"
#include "model/model_options.h"
#include "rl/rollout/judge_reward.h"
#include "util/error.h"
#include "util/json.h"

namespace rlcpp {

namespace {

// A reward model trained with LoRA: its adapter directory (the adapter carries the score head).
bool adapter_dir(const std::string& path) {
  return is_peft_adapter_dir(path) && !std::filesystem::exists(std::filesystem::path(path) / "config.json");
}

// The model of a --reward-model directory, refused by name when it is not a reward model; its
// config (a LoRA adapter's: its base's, as a one-label classifier).
ModelConfig reward_model_config(const std::string& path) {
  const std::filesystem::path dir = path;
  if (adapter_dir(path)) {
    const Json saved = load_json_file(dir / kAdapterConfigFile);
    if (saved.value("modules_to_save", Json()) != Json::array({"score"})) {
      throw_user_error("--reward-model {}: a LoRA adapter of a causal LM, not of a reward model (no trained \"score\" head "
                       "in modules_to_save); give a reward model rlcpp train-rm wrote", path);
    }
    ModelConfig base = ModelConfig::load(read_peft_adapter(dir).base_model);
    base.num_labels = 1;
    return base;
  }
  const ModelConfig config = ModelConfig::load(dir);  // names a missing or unsupported config.json
  if (!config.classifier() || config.num_labels != 1) {
    throw_user_error("--reward-model {}: {} is not a reward model (a ...ForSequenceClassification with one label, as "
                     "rlcpp train-rm writes); train one with rlcpp train-rm -m {}", path,
                     config.architecture.empty() ? config.model_type : config.architecture, path);
  }
  return config;
}

}  // namespace

RewardModelScorer::RewardModelScorer(const ModelRewardOptions& options, const std::string& device,
                                     const std::string& run_dtype)
    : batch_(std::max<int64_t>(1, options.batch)) {
  reward_model_config(options.path);  // refused by name first
  model_ = Transformer::classifier_from_pretrained(
      options.path, model_options_from_flags(options.dtype.empty() ? run_dtype : options.dtype, device), 1, /*seed=*/0);
  model_->eval();
}

std::vector<double> RewardModelScorer::score(const std::vector<std::vector<int32_t>>& rows) {
  std::vector<double> out;
  out.reserve(rows.size());
  std::lock_guard lock(mutex_);
  torch::NoGradGuard no_grad;
  const auto batch = static_cast<size_t>(batch_);
  for (size_t begin = 0; begin < rows.size(); begin += batch) {
    const size_t end = std::min(rows.size(), begin + batch);
    std::vector<const std::vector<int32_t>*> chunk;
    for (size_t k = begin; k < end; ++k) chunk.push_back(&rows[k]);
    const auto [ids, mask] = left_padded(chunk);
    const auto scores = model_->scores(ids, mask).select(1, 0).to(torch::kFloat64).cpu().contiguous();
    out.insert(out.end(), scores.data_ptr<double>(), scores.data_ptr<double>() + scores.numel());
  }
  return out;
}

ModelReward::ModelReward(const ModelRewardOptions& options, const std::string& device, const std::string& run_dtype,
                         RowScorer scorer)
    : options_(options), scorer_(std::move(scorer)) {
  const ModelConfig config = reward_model_config(options.path);
  max_positions_ = config.max_position_embeddings;
  if (!scorer_) scorer_ = [local = std::make_shared<RewardModelScorer>(options, device, run_dtype)](
                              const std::vector<std::vector<int32_t>>& rows) { return local->score(rows); };
  tokenizer_ = Tokenizer::from_dir(options.path);
  template_ = std::make_unique<ChatTemplate>(*tokenizer_);
  if (options.normalize) {
    const auto& raw = config.raw;
    if (!raw.contains("mean") || !raw.contains("std") || !raw["mean"].is_number() || !raw["std"].is_number() ||
        !(raw["std"].get<double>() > 0)) {
      throw_user_error("--normalize-reward: {} holds no \"mean\" and positive \"std\" of the model's scores in its "
                       "config.json (rlcpp train-rm writes them{}); drop the flag or add them", options.path,
                       adapter_dir(options.path) ? "; with LoRA, into step-N/merged: give that directory" : "");
    }
    mean_ = raw["mean"].get<double>();
    std_ = raw["std"].get<double>();
  }
  spdlog::info("reward model {}: {} ({} layers){}", options.path, config.architecture, config.num_hidden_layers,
               options.normalize ? fmt::format(", scores standardised with mean {:.4g} and std {:.4g}", mean_, std_) : "");
}

std::vector<int32_t> ModelReward::conversation_ids(const RewardInput& input) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (input.messages.is_array() && !input.messages.empty()) {
    for (const auto& m : input.messages) messages.push_back(nlohmann::ordered_json(m));
  } else {
    messages.push_back({{"role", "user"}, {"content", input.prompt}});
  }
  messages.push_back({{"role", "assistant"}, {"content", input.response}});
  auto ids = tokenizer_->encode(template_->render(messages, /*add_generation_prompt=*/false));
  // The score is read at the last token: a conversation longer than the model's positions keeps its end.
  if (max_positions_ > 0 && static_cast<int64_t>(ids.size()) > max_positions_) {
    ids.erase(ids.begin(), ids.end() - max_positions_);
  }
  if (ids.empty()) ids.push_back(0);
  return ids;
}

std::vector<ComponentScore> ModelReward::score(const std::vector<RewardInput>& inputs) {
  std::vector<std::vector<int32_t>> rows;
  rows.reserve(inputs.size());
  for (const auto& input : inputs) rows.push_back(conversation_ids(input));
  // Similar lengths in one batch: less padding.
  std::vector<size_t> order(rows.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rows[a].size() < rows[b].size(); });
  std::vector<std::vector<int32_t>> sorted;
  sorted.reserve(rows.size());
  for (const size_t k : order) sorted.push_back(std::move(rows[k]));
  const std::vector<double> raw_scores = scorer_(sorted);
  RLCPP_CHECK(raw_scores.size() == sorted.size(), "{} reward-model scores for {} conversations", raw_scores.size(),
              sorted.size());
  std::vector<ComponentScore> out(inputs.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const double raw = raw_scores[k];
    double value = options_.normalize ? (raw - mean_) / std_ : raw;
    if (options_.clip > 0) value = std::clamp(value, -options_.clip, options_.clip);
    ComponentScore& score = out[order[k]];
    score.value = value;
    if (options_.normalize || options_.clip > 0) score.parts["raw"] = raw;
  }
  return out;
}

RewardFunction make_run_reward(const RewardOptions& options, const std::string& device, const std::string& dtype,
                               RowScorer reward_model_scorer) {
  RewardFunction reward = make_reward_function(options);
  if (options.type == RewardType::kModel && options.model.path.empty()) {
    throw_user_error("-rt model: give the reward model with --reward-model DIR");
  }
  if (!options.model.path.empty()) {
    const auto weights = reward_weights(options);
    const auto it = weights.find("model");
    reward.add("model", std::make_shared<ModelReward>(options.model, device, dtype, std::move(reward_model_scorer)),
               it != weights.end() ? it->second : 1.0);
  }
  if (options.type == RewardType::kJudge && options.judge.url.empty()) {
    throw_user_error("-rt judge: give the judge's servers with --judge-url http://HOST:PORT[,...] and its prompt with "
                     "--judge-template FILE");
  }
  if (!options.judge.url.empty()) {
    const auto weights = reward_weights(options);
    const auto it = weights.find("judge");
    reward.add("judge", std::make_shared<JudgeReward>(options.judge), it != weights.end() ? it->second : 1.0);
  }
  return reward;
}

}  // namespace rlcpp
