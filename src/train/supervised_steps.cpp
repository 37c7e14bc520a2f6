// The trainer's supervised steps: SFT (masked NLL of chats) and reward-model training (the
// Bradley–Terry loss over preference pairs); the policy-gradient step is trainer.cpp's.
#include <cmath>

#include "train/sample.h"
#include "train/trainer.h"
#include "util/error.h"

namespace rlcpp {

TrainStepMetrics Trainer::sft_step(const std::vector<SftSample>& batch, double global_tokens) {
  RLCPP_CHECK(!batch.empty(), "an SFT step without examples");
  RLCPP_CHECK(stages_ == nullptr, "SFT with pipeline parallelism");
  double total = 0;
  for (const auto& s : batch) {
    RLCPP_CHECK(s.ids.size() == s.loss_mask.size() && !s.ids.empty(), "SFT example of {} ids and {} mask entries",
                s.ids.size(), s.loss_mask.size());
    for (size_t t = 1; t < s.ids.size(); ++t) total += s.loss_mask[t];
  }
  const double lr = begin_update();
  TrainStepMetrics metrics;
  // Micro-batches as the policy's steps form them (micro_batches; an example's length is its ids').
  std::vector<Sample> lengths;
  for (const auto& s : batch) lengths.push_back(model_sample({s.ids.front()}, std::vector<int32_t>(s.ids.size() - 1, 0), 0.0));
  const auto micros = micro_batches_of(lengths);
  const auto n_micro = static_cast<int64_t>(micros.size());
  for (int64_t k = lockstep_passes(n_micro, true) - n_micro; k > 0; --k) empty_pass(true);
  double nll = 0;
  for (const auto& [begin, end] : micros) {
    // Right-padded rows [B, L], or padding-free one row [1, T] numbering the examples (PackedBatch).
    int64_t length = 0, total_ids = 0;
    for (size_t k = begin; k < end; ++k) {
      length = std::max<int64_t>(length, static_cast<int64_t>(batch[k].ids.size()));
      total_ids += static_cast<int64_t>(batch[k].ids.size());
    }
    const int64_t rows = static_cast<int64_t>(end - begin);
    const std::vector<int64_t> shape = config_.padding_free ? std::vector<int64_t>{1, total_ids} : std::vector<int64_t>{rows, length};
    auto ids = torch::zeros(shape, torch::kInt64);
    auto mask = torch::zeros(shape, torch::kInt64);
    auto targets = torch::full(shape, -1, torch::kInt64);
    auto* ids_p = ids.data_ptr<int64_t>();
    auto* mask_p = mask.data_ptr<int64_t>();
    auto* targets_p = targets.data_ptr<int64_t>();
    int64_t at = 0;
    for (int64_t row = 0; row < rows; ++row) {
      const auto& s = batch[begin + static_cast<size_t>(row)];
      if (!config_.padding_free) at = row * length;
      for (size_t t = 0; t < s.ids.size(); ++t, ++at) {
        ids_p[at] = s.ids[t];
        mask_p[at] = config_.padding_free ? row + 1 : 1;
        if (t > 0 && s.loss_mask[t]) targets_p[at - 1] = s.ids[t];  // t-1 predicts t
      }
    }
    auto logp = policy_->token_logprobs(ids, targets, 1.0, mask, nullptr, policy_context_);
    auto loss = -logp.sum() / std::max(1.0, global_tokens > 0 ? global_tokens : total);
    loss.backward();
    nll += loss.item<double>();
  }
  metrics.values["loss"] = nll;
  metrics.values["n_tokens"] = total;
  finish_update(metrics, lr);
  return metrics;
}

namespace {

// The scores of micro-batch pairs [begin, end): chosen [P] and rejected [P], one forward over the
// 2P sequences (chosen first), left-padded rows as Transformer::scores takes them, or padding-free
// one row of them back to back.
std::pair<torch::Tensor, torch::Tensor> pair_scores(Transformer& model, const std::vector<PreferencePair>& pairs, size_t begin,
                                                    size_t end, const ForwardContext& context, bool padding_free) {
  std::vector<const std::vector<int32_t>*> rows;
  for (size_t k = begin; k < end; ++k) rows.push_back(&pairs[k].chosen);
  for (size_t k = begin; k < end; ++k) rows.push_back(&pairs[k].rejected);
  const auto [ids, mask] = padding_free ? one_row(rows) : left_padded(rows);
  const auto scores = model.scores(ids, mask, context).select(1, 0);
  const auto n = static_cast<int64_t>(end - begin);
  return {scores.slice(0, 0, n), scores.slice(0, n, 2 * n)};
}

torch::Tensor pair_margins(const std::vector<PreferencePair>& pairs, size_t begin, size_t end, const torch::Tensor& like) {
  std::vector<double> margins;
  for (size_t k = begin; k < end; ++k) margins.push_back(pairs[k].margin);
  return torch::tensor(margins, torch::kFloat64).to(like.options());
}

// Sums of a batch's pair figures (preference_step's metrics once divided by the pair count).
struct PairSums {
  double loss = 0, correct = 0, chosen = 0, rejected = 0, squares = 0;
  void add(const torch::Tensor& loss_sum, const torch::Tensor& chosen_scores, const torch::Tensor& rejected_scores) {
    loss += loss_sum.item<double>();
    correct += (chosen_scores > rejected_scores).sum().item<double>();
    chosen += chosen_scores.sum().item<double>();
    rejected += rejected_scores.sum().item<double>();
    squares += (chosen_scores.to(torch::kFloat64).square().sum() + rejected_scores.to(torch::kFloat64).square().sum()).item<double>();
  }
  // score_mean and score_std: over every score, chosen and rejected alike (what --normalize-reward uses).
  std::map<std::string, double> figures(double n) const {
    const double mean = (chosen + rejected) / (2 * n);
    return {{"loss", loss}, {"accuracy", correct / n}, {"chosen", chosen / n}, {"rejected", rejected / n},
            {"margin", (chosen - rejected) / n}, {"n_pairs", n}, {"score_mean", mean},
            {"score_std", std::sqrt(std::max(0.0, squares / (2 * n) - mean * mean))}};
  }
};

void check_pairs(const std::vector<PreferencePair>& pairs, const ModelConfig& config) {
  RLCPP_CHECK(!pairs.empty(), "a preference step without pairs");
  RLCPP_CHECK(config.classifier() && config.num_labels == 1, "preference training of {} (a reward model has one label)",
              config.architecture);
  for (const auto& p : pairs) RLCPP_CHECK(!p.chosen.empty() && !p.rejected.empty(), "a preference pair with an empty side");
}

}  // namespace

TrainStepMetrics Trainer::preference_step(const std::vector<PreferencePair>& batch, double global_pairs) {
  check_pairs(batch, policy_->config());
  RLCPP_CHECK(stages_ == nullptr, "reward-model training with pipeline parallelism");
  const double lr = begin_update();
  const double n = global_pairs > 0 ? global_pairs : static_cast<double>(batch.size());
  const size_t micro = static_cast<size_t>(config_.train_microbatch_size);
  const auto n_micro = static_cast<int64_t>((batch.size() + micro - 1) / micro);
  for (int64_t k = lockstep_passes(n_micro, true) - n_micro; k > 0; --k) empty_pass(true);
  PairSums sums;
  for (size_t begin = 0; begin < batch.size(); begin += micro) {
    const size_t end = std::min(batch.size(), begin + micro);
    const auto [chosen, rejected] = pair_scores(*policy_, batch, begin, end, policy_context_, config_.padding_free);
    const auto loss = bradley_terry_loss(chosen, rejected, pair_margins(batch, begin, end, chosen), config_.preference).sum() / n;
    loss.backward();
    sums.add(loss * n, chosen.detach(), rejected.detach());
  }
  TrainStepMetrics metrics;
  metrics.values = sums.figures(n);
  metrics.values["loss"] /= n;
  finish_update(metrics, lr);
  return metrics;
}

std::map<std::string, double> Trainer::preference_figures(const std::vector<PreferencePair>& pairs) const {
  check_pairs(pairs, policy_->config());
  torch::NoGradGuard no_grad;
  policy_->eval();
  ForwardContext context = policy_context_;
  if (sharded_parameters()) context.holder = nullptr;  // gathered whole by the caller: no layer is gathered
  const size_t micro = static_cast<size_t>(config_.train_microbatch_size);
  PairSums sums;
  for (size_t begin = 0; begin < pairs.size(); begin += micro) {
    const size_t end = std::min(pairs.size(), begin + micro);
    const auto [chosen, rejected] = pair_scores(*policy_, pairs, begin, end, context, config_.padding_free);
    sums.add(bradley_terry_loss(chosen, rejected, pair_margins(pairs, begin, end, chosen), config_.preference).sum(), chosen,
             rejected);
  }
  const double n = static_cast<double>(pairs.size());
  auto figures = sums.figures(n);
  figures["loss"] /= n;
  return figures;
}

}  // namespace rlcpp
