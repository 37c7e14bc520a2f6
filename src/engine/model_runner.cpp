#include "engine/model_runner.h"

#include <nlohmann/json.hpp>

#include <random>

#include "model/kernel_linear.h"
#include "model/logprobs.h"
#include "util/error.h"

namespace rlcpp {

namespace {

// A step's hidden states from one pipeline stage to the next (apart from the trainer's tags,
// train/pipeline.cpp).
constexpr int kStageHiddenTag = 32001;

}  // namespace

int64_t StepInputs::n_tokens() const {
  int64_t n = 0;
  for (const auto& w : work) n += static_cast<int64_t>(w.tokens.size());
  return n;
}

StepInputs step_inputs(const ScheduledBatch& batch, Scheduler& scheduler) {
  StepInputs out;
  out.prefill = batch.prefill;
  out.copies = batch.copies;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int64_t row = 0;
  for (const auto& w : batch.work) {
    const Sequence& s = scheduler.sequence(w.seq);
    StepInputs::Work work;
    work.start = w.start;
    work.tokens.assign(s.tokens.begin() + w.start, s.tokens.begin() + w.start + w.n_tokens);
    work.blocks = s.blocks;
    work.samples = !w.samplers.empty();
    out.work.push_back(std::move(work));
    if (w.samplers.empty()) continue;
    for (int64_t id : w.samplers) {  // a group's fresh samples share their leader's row
      Sequence& sampler = scheduler.sequence(id);
      const SamplingParams& p = *sampler.params;
      SamplingParams params;
      params.temperature = p.temperature;
      params.top_k = p.top_k;
      params.top_p = p.top_p;
      params.min_p = p.min_p;
      params.logprobs = p.logprobs;
      out.sample_rows.push_back(row);
      out.params.push_back(params);
      out.u.push_back(uniform(sampler.rng));
    }
    ++row;
  }
  return out;
}

std::string encode_step(const StepInputs& in) {
  nlohmann::json work = nlohmann::json::array(), copies = nlohmann::json::array(), params = nlohmann::json::array();
  for (const auto& w : in.work) work.push_back({w.start, w.tokens, w.blocks, w.samples});
  for (const auto& c : in.copies) copies.push_back({c.src, c.dst});
  for (const auto& p : in.params) params.push_back({p.temperature, p.top_k, p.top_p, p.min_p, p.logprobs});
  const auto bytes = nlohmann::json::to_msgpack(
      {{"prefill", in.prefill}, {"copies", copies}, {"work", work}, {"rows", in.sample_rows}, {"params", params}, {"u", in.u}});
  return {bytes.begin(), bytes.end()};
}

StepInputs decode_step(const std::string& bytes) {
  StepInputs out;
  try {
    const auto j = nlohmann::json::from_msgpack(bytes);
    out.prefill = j.at("prefill").get<bool>();
    for (const auto& c : j.at("copies")) out.copies.push_back({c.at(0).get<int32_t>(), c.at(1).get<int32_t>()});
    for (const auto& w : j.at("work")) {
      out.work.push_back({w.at(0).get<int64_t>(), w.at(1).get<std::vector<int32_t>>(), w.at(2).get<std::vector<int32_t>>(),
                          w.at(3).get<bool>()});
    }
    out.sample_rows = j.at("rows").get<std::vector<int64_t>>();
    for (const auto& p : j.at("params")) {
      SamplingParams params;
      params.temperature = p.at(0).get<double>();
      params.top_k = p.at(1).get<int64_t>();
      params.top_p = p.at(2).get<double>();
      params.min_p = p.at(3).get<double>();
      params.logprobs = p.at(4).get<int64_t>();
      out.params.push_back(params);
    }
    out.u = j.at("u").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    throw InternalError(fmt::format("a corrupt engine step from the group's first rank ({} bytes): {}", bytes.size(), e.what()));
  }
  RLCPP_CHECK(out.params.size() == out.u.size() && out.params.size() == out.sample_rows.size(),
              "an engine step with {} rows, {} parameters and {} draws", out.sample_rows.size(), out.params.size(),
              out.u.size());
  return out;
}

torch::Tensor ModelRunner::run(const StepInputs& batch) {
  torch::NoGradGuard no_grad;
  KernelScope kernels;  // generation's small batches on the CPU kernels (model/kernel_linear.h)
  for (const auto& copy : batch.copies) cache_.copy_block(copy.src, copy.dst);
  const int64_t bs = cache_.block_size();
  const int64_t n_work = static_cast<int64_t>(batch.work.size());
  const int64_t total = batch.n_tokens();
  const auto device = model_.options().device;
  auto longs = [&](const std::vector<int64_t>& v, std::vector<int64_t> shape) {
    return torch::tensor(v, torch::kInt64).view(shape).to(device);
  };
  std::vector<int64_t> ids(total), positions(total), slots(total), last_rows;
  PagedStep step;
  step.kernel = paged_kernel_applies(cache_, model_.options().dtype);
  if (step.kernel) {
    step.token_pos.resize(static_cast<size_t>(total));
    step.token_table.resize(static_cast<size_t>(total));
  }
  int64_t max_queries = 0, max_keys = 0;
  for (const auto& w : batch.work) {
    const auto n = static_cast<int64_t>(w.tokens.size());
    max_queries = std::max(max_queries, n);
    max_keys = std::max(max_keys, w.start + n);
  }
  // LibTorch's padded form only when the kernel does not run.
  const int64_t padded_queries = step.kernel ? 0 : n_work * max_queries, padded_keys = step.kernel ? 0 : n_work * max_keys;
  std::vector<int64_t> query_index(padded_queries, 0), query_pos(padded_queries, -1), key_slots(padded_keys, 0);
  std::vector<int64_t> key_valid(padded_keys, 0), packed_index(step.kernel ? 0 : total);
  int64_t row = 0;
  for (int64_t b = 0; b < n_work; ++b) {
    const auto& w = batch.work[b];
    const auto n_tokens = static_cast<int64_t>(w.tokens.size());
    auto slot_of = [&](int64_t p) { return static_cast<int64_t>(w.blocks[static_cast<size_t>(p / bs)]) * bs + p % bs; };
    const int64_t table = static_cast<int64_t>(step.blocks.size());
    if (step.kernel) step.blocks.insert(step.blocks.end(), w.blocks.begin(), w.blocks.end());
    for (int64_t t = 0; t < n_tokens; ++t, ++row) {
      const int64_t p = w.start + t;
      ids[row] = w.tokens[static_cast<size_t>(t)];
      positions[row] = p;
      slots[row] = slot_of(p);
      if (step.kernel) {
        step.token_pos[row] = static_cast<int32_t>(p);
        step.token_table[row] = table;
      } else {
        query_index[b * max_queries + t] = row;
        query_pos[b * max_queries + t] = p;
        packed_index[row] = b * max_queries + t;
      }
    }
    if (w.samples) last_rows.push_back(row - 1);  // a prompt chunk that samples nothing needs no logits
    if (!step.kernel) {
      for (int64_t p = 0; p < w.start + n_tokens; ++p) {
        key_slots[b * max_keys + p] = slot_of(p);
        key_valid[b * max_keys + p] = 1;
      }
    }
  }
  step.slot_mapping = longs(slots, {total});
  if (!step.kernel) {
    step.query_index = longs(query_index, {n_work, max_queries});
    step.query_pos = longs(query_pos, {n_work, max_queries});
    step.key_slots = longs(key_slots, {n_work, max_keys});
    step.key_valid = longs(key_valid, {n_work, max_keys}).to(torch::kBool);
    step.packed_index = longs(packed_index, {total});
  }
  PagedAttention attention(cache_, step);
  const PipelineStage& stage = model_.options().stage;
  ForwardContext context = context_;
  if (!stage.first()) {  // the stage before's output: [T, H], the same on each of its tensor-parallel ranks
    context.stage_input = torch::empty({total, model_.config().hidden_size}, torch::TensorOptions().dtype(model_.options().dtype));
    pipeline_->recv(context.stage_input, stage.index - 1, kStageHiddenTag);
    context.stage_input = context.stage_input.to(device);
  }
  auto hidden = model_.hidden_states_packed(longs(ids, {total}), longs(positions, {total}), attention, context);
  const auto rows = static_cast<int64_t>(last_rows.size());
  const auto dtype = logprob_dtype(model_.options().dtype);
  torch::Tensor logits;
  if (stage.last()) {  // the same projection and dtype as the trainer's log-prob head (logprobs.cpp)
    logits = linear_no_grad(hidden.index_select(0, longs(last_rows, {rows})), model_.stored_output_weight(), {},
                            model_.stored_output_scale())
                 .to(dtype);
    if (stage.whole()) return logits;
    logits = logits.cpu();
  } else {
    pipeline_->send(hidden.cpu().contiguous(), stage.index + 1, kStageHiddenTag);
    const auto* tp = model_.tensor_parallel();
    const int64_t vocab = tp != nullptr ? tp->shape().vocab_end - tp->shape().vocab_begin : model_.config().vocab_size;
    logits = torch::empty({rows, vocab}, torch::TensorOptions().dtype(dtype));
  }
  if (rows > 0) pipeline_->broadcast(logits, stage.count - 1);
  return logits.to(device);
}

}  // namespace rlcpp
