// The trainer's supervised steps: SFT (masked NLL of chats) and reward-model training (the
// Bradley–Terry loss over preference pairs); the policy-gradient step is trainer.cpp's.
#include <cmath>

#include "model/logprobs.h"
#include "train/sample.h"
#include "train/trainer.h"
#include "util/error.h"

namespace rlcpp {

TrainStepMetrics Trainer::sft_step(const std::vector<SftSample>& batch, double global_tokens) {
  RLCPP_CHECK(!batch.empty(), "an SFT step without examples");
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
  // Micro-batch k: right-padded rows [B, L], or padding-free one row [1, T] numbering the examples
  // (PackedBatch), with the targets of the learned tokens.
  struct Rows {
    torch::Tensor ids, mask, targets;
  };
  auto rows_of = [&](int64_t k) {
    const auto [begin, end] = micros[static_cast<size_t>(k)];
    int64_t length = 0, total_ids = 0;
    for (size_t j = begin; j < end; ++j) {
      length = std::max<int64_t>(length, static_cast<int64_t>(batch[j].ids.size()));
      total_ids += static_cast<int64_t>(batch[j].ids.size());
    }
    const int64_t rows = static_cast<int64_t>(end - begin);
    const std::vector<int64_t> shape = config_.padding_free ? std::vector<int64_t>{1, total_ids} : std::vector<int64_t>{rows, length};
    Rows out{torch::zeros(shape, torch::kInt64), torch::zeros(shape, torch::kInt64), torch::full(shape, -1, torch::kInt64)};
    auto* ids_p = out.ids.data_ptr<int64_t>();
    auto* mask_p = out.mask.data_ptr<int64_t>();
    auto* targets_p = out.targets.data_ptr<int64_t>();
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
    return out;
  };
  double nll = 0;
  StageWork work;
  work.micros = n_micro;
  work.input_shape = [&](int64_t k) {
    auto shape = rows_of(k).ids.sizes().vec();
    shape.push_back(policy_->config().hidden_size);
    return shape;
  };
  work.forward = [&](int64_t k, const torch::Tensor& input) -> torch::Tensor {
    const Rows rows = rows_of(k);
    ForwardContext context = policy_context_;
    context.stage_input = input;
    auto h = policy_->hidden_states(rows.ids, rows.mask, context);
    if (!policy_->options().stage.last()) return h;
    auto logp = token_logprobs_chunked(h.reshape({-1, h.size(-1)}), policy_->output_weight(),
                                       rows.targets.to(h.device()).reshape({-1}), 1.0,
                                       policy_->options().logprob_chunk_tokens, nullptr, policy_->vocab_shard());
    auto loss = -logp.sum() / std::max(1.0, global_tokens > 0 ? global_tokens : total);
    nll += loss.item<double>();
    return loss;
  };
  run_passes(work, /*backward=*/true);
  metrics.values["loss"] = nll;
  metrics.values["n_tokens"] = total;
  share_last_stage(metrics, {});
  finish_update(metrics, lr);
  return metrics;
}

namespace {

// Micro-batch pairs [begin, end) as one batch of their 2P sequences (chosen first): left-padded
// rows as Transformer::scores takes them, or padding-free one row of them back to back.
std::pair<torch::Tensor, torch::Tensor> pair_rows(const std::vector<PreferencePair>& pairs, size_t begin, size_t end,
                                                  bool padding_free) {
  std::vector<const std::vector<int32_t>*> rows;
  for (size_t k = begin; k < end; ++k) rows.push_back(&pairs[k].chosen);
  for (size_t k = begin; k < end; ++k) rows.push_back(&pairs[k].rejected);
  return padding_free ? one_row(rows) : left_padded(rows);
}

// The chosen [P] and rejected [P] scores of such a batch from the last stage's hidden states.
std::pair<torch::Tensor, torch::Tensor> pair_scores(Transformer& model, const torch::Tensor& h, const torch::Tensor& mask,
                                                    const ForwardContext& context) {
  const auto scores = model.last_token_scores(h, mask, context).select(1, 0);
  const auto n = scores.size(0) / 2;
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
  // As figures a pipeline's last stage shares (Trainer::share_last_stage), and back.
  std::map<std::string, double> sums() const {
    return {{"loss", loss}, {"correct", correct}, {"chosen", chosen}, {"rejected", rejected}, {"squares", squares}};
  }
  static PairSums from(const std::map<std::string, double>& m) {
    return {m.at("loss"), m.at("correct"), m.at("chosen"), m.at("rejected"), m.at("squares")};
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

// The pipelined passes of a preference batch in micro-batches of -tmbs pairs: on the last stage
// each one's scores go to `scored` (with the margins), whose result backward runs from.
StageWork Trainer::pair_passes(const std::vector<PreferencePair>& pairs, const ForwardContext& context,
                               const std::function<torch::Tensor(size_t, size_t, const torch::Tensor&, const torch::Tensor&,
                                                                 const torch::Tensor&)>& scored) const {
  const size_t micro = static_cast<size_t>(config_.train_microbatch_size);
  StageWork work;
  work.micros = static_cast<int64_t>((pairs.size() + micro - 1) / micro);
  auto range = [&pairs, micro](int64_t k) {
    const size_t begin = static_cast<size_t>(k) * micro;
    return std::pair{begin, std::min(pairs.size(), begin + micro)};
  };
  const bool padding_free = config_.padding_free;
  const int64_t hidden = policy_->config().hidden_size;
  work.input_shape = [&pairs, range, padding_free, hidden](int64_t k) {
    const auto [begin, end] = range(k);
    auto shape = pair_rows(pairs, begin, end, padding_free).first.sizes().vec();
    shape.push_back(hidden);
    return shape;
  };
  Transformer* model = policy_.get();
  work.forward = [&pairs, range, padding_free, model, context, scored](int64_t k, const torch::Tensor& input) {
    const auto [begin, end] = range(k);
    const auto [ids, mask] = pair_rows(pairs, begin, end, padding_free);
    ForwardContext here = context;
    here.stage_input = input;
    auto h = model->hidden_states(ids, mask, here);
    if (!model->options().stage.last()) return h;
    const auto [chosen, rejected] = pair_scores(*model, h, mask, here);
    return scored(begin, end, chosen, rejected, pair_margins(pairs, begin, end, chosen));
  };
  return work;
}

TrainStepMetrics Trainer::preference_step(const std::vector<PreferencePair>& batch, double global_pairs) {
  check_pairs(batch, policy_->config());
  const double lr = begin_update();
  const double n = global_pairs > 0 ? global_pairs : static_cast<double>(batch.size());
  PairSums sums;
  const StageWork work = pair_passes(batch, policy_context_, [&](size_t, size_t, const torch::Tensor& chosen,
                                                                 const torch::Tensor& rejected, const torch::Tensor& margins) {
    const auto loss = bradley_terry_loss(chosen, rejected, margins, config_.preference).sum() / n;
    sums.add(loss * n, chosen.detach(), rejected.detach());
    return loss;
  });
  for (int64_t k = lockstep_passes(work.micros, true) - work.micros; k > 0; --k) empty_pass(true);
  run_passes(work, /*backward=*/true);
  TrainStepMetrics shared;
  shared.values = sums.sums();
  share_last_stage(shared, {});
  TrainStepMetrics metrics;
  metrics.values = PairSums::from(shared.values).figures(n);
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
  PairSums sums;
  run_passes(pair_passes(pairs, context, [&](size_t, size_t, const torch::Tensor& chosen, const torch::Tensor& rejected,
                                             const torch::Tensor& margins) {
               const auto loss = bradley_terry_loss(chosen, rejected, margins, config_.preference).sum();
               sums.add(loss, chosen, rejected);
               return loss;
             }),
             /*backward=*/false);
  TrainStepMetrics shared;
  shared.values = sums.sums();
  share_last_stage(shared, {});
  const double n = static_cast<double>(pairs.size());
  auto figures = PairSums::from(shared.values).figures(n);
  figures["loss"] /= n;
  return figures;
}

}  // namespace rlcpp
