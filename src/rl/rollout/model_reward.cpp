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

ModelReward::ModelReward(const ModelRewardOptions& options, const std::string& device, const std::string& run_dtype)
    : options_(options) {
  const std::filesystem::path dir = options.path;
  const bool adapter = is_peft_adapter_dir(dir) && !std::filesystem::exists(dir / "config.json");
  if (adapter) {  // a reward model trained with LoRA: the adapter carries the score head
    const Json saved = load_json_file(dir / kAdapterConfigFile);
    if (saved.value("modules_to_save", Json()) != Json::array({"score"})) {
      throw_user_error("--reward-model {}: a LoRA adapter of a causal LM, not of a reward model (no trained \"score\" head "
                       "in modules_to_save); give a reward model rlcpp train-rm wrote", options.path);
    }
  } else {
    const ModelConfig config = ModelConfig::load(dir);  // names a missing or unsupported config.json
    if (!config.classifier() || config.num_labels != 1) {
      throw_user_error("--reward-model {}: {} is not a reward model (a ...ForSequenceClassification with one label, as "
                       "rlcpp train-rm writes); train one with rlcpp train-rm -m {}", options.path,
                       config.architecture.empty() ? config.model_type : config.architecture, options.path);
    }
  }
  model_ = Transformer::classifier_from_pretrained(
      dir, model_options_from_flags(options.dtype.empty() ? run_dtype : options.dtype, device), 1, /*seed=*/0);
  model_->eval();
  const ModelConfig& config = model_->config();
  tokenizer_ = Tokenizer::from_dir(dir);
  template_ = std::make_unique<ChatTemplate>(*tokenizer_);
  if (options.normalize) {
    const auto& raw = config.raw;
    if (!raw.contains("mean") || !raw.contains("std") || !raw["mean"].is_number() || !raw["std"].is_number() ||
        !(raw["std"].get<double>() > 0)) {
      throw_user_error("--normalize-reward: {} holds no \"mean\" and positive \"std\" of the model's scores in its "
                       "config.json (rlcpp train-rm writes them{}); drop the flag or add them", options.path,
                       adapter ? "; with LoRA, into step-N/merged: give that directory" : "");
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
  const int64_t max_positions = model_->config().max_position_embeddings;
  if (max_positions > 0 && static_cast<int64_t>(ids.size()) > max_positions) {
    ids.erase(ids.begin(), ids.end() - max_positions);
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
  std::vector<ComponentScore> out(inputs.size());
  std::lock_guard lock(mutex_);
  torch::NoGradGuard no_grad;
  const auto batch = static_cast<size_t>(std::max<int64_t>(1, options_.batch));
  for (size_t begin = 0; begin < order.size(); begin += batch) {
    const size_t end = std::min(order.size(), begin + batch);
    std::vector<const std::vector<int32_t>*> chunk;
    for (size_t k = begin; k < end; ++k) chunk.push_back(&rows[order[k]]);
    const auto [ids, mask] = left_padded(chunk);
    const auto scores = model_->scores(ids, mask).select(1, 0).to(torch::kFloat64).cpu();
    const auto* s = scores.data_ptr<double>();
    for (size_t k = begin; k < end; ++k) {
      const double raw = s[k - begin];
      double value = options_.normalize ? (raw - mean_) / std_ : raw;
      if (options_.clip > 0) value = std::clamp(value, -options_.clip, options_.clip);
      ComponentScore& score = out[order[k]];
      score.value = value;
      if (options_.normalize || options_.clip > 0) score.parts["raw"] = raw;
    }
  }
  return out;
}

RewardFunction make_run_reward(const RewardOptions& options, const std::string& device, const std::string& dtype) {
  RewardFunction reward = make_reward_function(options);
  if (options.type == RewardType::kModel && options.model.path.empty()) {
    throw_user_error("-rt model: give the reward model with --reward-model DIR");
  }
  if (!options.model.path.empty()) {
    const auto weights = reward_weights(options);
    const auto it = weights.find("model");
    reward.add("model", std::make_shared<ModelReward>(options.model, device, dtype), it != weights.end() ? it->second : 1.0);
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
