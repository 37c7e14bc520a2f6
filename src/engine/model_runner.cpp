#include "engine/model_runner.h"

#include "model/kernel_linear.h"
#include "model/logprobs.h"

namespace rlcpp {

torch::Tensor ModelRunner::run(const ScheduledBatch& batch, const Scheduler& scheduler) {
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
    max_queries = std::max(max_queries, w.n_tokens);
    max_keys = std::max(max_keys, w.start + w.n_tokens);
  }
  // LibTorch's padded form only when the kernel does not run.
  const int64_t padded_queries = step.kernel ? 0 : n_work * max_queries, padded_keys = step.kernel ? 0 : n_work * max_keys;
  std::vector<int64_t> query_index(padded_queries, 0), query_pos(padded_queries, -1), key_slots(padded_keys, 0);
  std::vector<int64_t> key_valid(padded_keys, 0), packed_index(step.kernel ? 0 : total);
  int64_t row = 0;
  for (int64_t b = 0; b < n_work; ++b) {
    const auto& w = batch.work[b];
    const Sequence& s = scheduler.sequence(w.seq);
    auto slot_of = [&](int64_t p) { return static_cast<int64_t>(s.blocks[static_cast<size_t>(p / bs)]) * bs + p % bs; };
    const int64_t table = static_cast<int64_t>(step.blocks.size());
    if (step.kernel) step.blocks.insert(step.blocks.end(), s.blocks.begin(), s.blocks.end());
    for (int64_t t = 0; t < w.n_tokens; ++t, ++row) {
      const int64_t p = w.start + t;
      ids[row] = s.tokens[static_cast<size_t>(p)];
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
    if (!w.samplers.empty()) last_rows.push_back(row - 1);  // a prompt chunk that samples nothing needs no logits
    if (!step.kernel) {
      for (int64_t p = 0; p < w.start + w.n_tokens; ++p) {
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
  auto hidden = model_.hidden_states_packed(longs(ids, {total}), longs(positions, {total}), attention);
  auto last = hidden.index_select(0, longs(last_rows, {static_cast<int64_t>(last_rows.size())}));
  // The same projection and dtype as the trainer's log-prob head (logprobs.cpp).
  return linear_no_grad(last, model_.stored_output_weight()).to(logprob_dtype(last.scalar_type()));
}

}  // namespace rlcpp
