#include "model/attention.h"

#include <torch/autograd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "kernels/softmax.h"
#include "model/kernel_linear.h"
#include "model/logprobs.h"
#include "util/error.h"
#include "util/torch_format.h"

#include <fmt/ranges.h>

namespace rlcpp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kBlockScoreBytes = 64.0 * 1024 * 1024;  // one block's scores in fp32

// Which keys each query row of [start, start + rows) may read, [B, 1, 1, rows, start + rows]:
// causal, not padding, and always its own position.
torch::Tensor allowed_keys(const torch::Tensor& key_mask, int64_t start, int64_t rows) {
  const int64_t end = start + rows;
  auto index = torch::TensorOptions().dtype(torch::kInt64).device(key_mask.device());
  auto i = torch::arange(start, end, index).unsqueeze(1);  // [rows, 1]
  auto j = torch::arange(0, end, index).unsqueeze(0);      // [1, end]
  auto allowed = j.le(i).unsqueeze(0).logical_and(key_mask.narrow(1, 0, end).unsqueeze(1));
  allowed = allowed.logical_or(j.eq(i).unsqueeze(0));  // [B, rows, end]
  return allowed.unsqueeze(1).unsqueeze(1);
}

// The scores of one block of query rows in the softmax dtype, masked: [B, Hkv, G, rows, end].
// qb [B, Hkv, G * rows, D] (the G query heads of a kv head stacked, so k is read once), kb [B, Hkv, end, D].
torch::Tensor block_scores(const torch::Tensor& qb, const torch::Tensor& kb, const torch::Tensor& key_mask,
                           int64_t start, int64_t rows, double scale, torch::ScalarType acc) {
  const int64_t batch = qb.size(0), kv_heads = qb.size(1), end = kb.size(2);
  const int64_t group = qb.size(2) / rows;
  auto scores = (torch::matmul(qb, kb.transpose(-1, -2)) * scale).to(acc);
  scores = scores.view({batch, kv_heads, group, rows, end});
  return scores.masked_fill_(allowed_keys(key_mask, start, rows).logical_not(), -std::numeric_limits<double>::infinity());
}

// fp32 on the CPU with the kernels on: the softmax passes over each block run as row kernels on
// every core (kernels/softmax.h), one pass each where LibTorch makes several on one thread.
bool softmax_on_kernels(const torch::Tensor& q) {
  return kernels_enabled() && q.device().is_cpu() && q.scalar_type() == torch::kFloat32;
}

// One block's unscaled scores q·kᵀ [B, Hkv, G * rows, end] and how the kernels read their rows.
std::pair<torch::Tensor, kernels::CausalRows> raw_scores(const torch::Tensor& qb, const torch::Tensor& kb,
                                                         const torch::Tensor& key_mask, int64_t start, int64_t rows,
                                                         double scale) {
  auto scores = torch::matmul(qb, kb.transpose(-1, -2)).contiguous();
  kernels::CausalRows c;
  c.rows = scores.numel() / kb.size(2);
  c.n = kb.size(2);
  c.block = rows;
  c.first = start;
  c.per_batch = qb.size(1) * qb.size(2);
  c.key_mask = key_mask.data_ptr<bool>();  // (a view of the row's keys from the block's sequence on)
  c.mask_stride = key_mask.stride(0);
  c.scale = static_cast<float>(scale);
  return {scores, c};
}

// Forward of one block: the probabilities in q's dtype [B, Hkv, G * rows, end] and each row's
// log-sum-exp in the softmax dtype [B, Hkv, G, rows].
std::pair<torch::Tensor, torch::Tensor> block_softmax(const torch::Tensor& qb, const torch::Tensor& kb,
                                                      const torch::Tensor& key_mask, int64_t start, int64_t rows,
                                                      double scale, torch::ScalarType acc) {
  const int64_t batch = qb.size(0), kv_heads = qb.size(1), group = qb.size(2) / rows;
  if (softmax_on_kernels(qb)) {
    auto [scores, c] = raw_scores(qb, kb, key_mask, start, rows, scale);
    auto lse = torch::empty({batch, kv_heads, group, rows}, qb.options());
    kernels::causal_softmax_rows(scores.data_ptr<float>(), c, lse.data_ptr<float>());
    return {scores, lse};
  }
  auto scores = block_scores(qb, kb, key_mask, start, rows, scale, acc);
  auto lse = scores.logsumexp(-1, /*keepdim=*/true);
  auto probs = scores.sub_(lse).exp_().to(qb.scalar_type()).view({batch, kv_heads, group * rows, kb.size(2)});
  return {probs, lse.squeeze(-1)};
}

// Backward's recompute of one block's probabilities from the saved log-sum-exp [B, Hkv, G, rows],
// in the softmax dtype: [B, Hkv, G * rows, end].
torch::Tensor block_probs(const torch::Tensor& qb, const torch::Tensor& kb, const torch::Tensor& key_mask,
                          int64_t start, int64_t rows, double scale, const torch::Tensor& lse) {
  if (softmax_on_kernels(qb)) {
    auto [scores, c] = raw_scores(qb, kb, key_mask, start, rows, scale);
    kernels::causal_probs_rows(scores.data_ptr<float>(), c, lse.contiguous().data_ptr<float>());
    return scores;
  }
  auto probs = block_scores(qb, kb, key_mask, start, rows, scale, lse.scalar_type()).sub_(lse.unsqueeze(-1)).exp_();
  return probs.view({qb.size(0), qb.size(1), qb.size(2), kb.size(2)});
}

// The block's score gradient dS = scale · P ⊙ (dP − delta), written over dp (both [B, Hkv, G * rows, end]
// in the softmax dtype; delta [B, Hkv, G, rows, 1]).
void block_score_grad(const torch::Tensor& probs, torch::Tensor& dp, const torch::Tensor& delta, double scale) {
  if (softmax_on_kernels(probs)) {
    const int64_t n = dp.size(-1);
    kernels::softmax_grad_rows(probs.data_ptr<float>(), dp.data_ptr<float>(), delta.contiguous().data_ptr<float>(),
                               dp.numel() / n, n, static_cast<float>(scale));
    return;
  }
  auto dp5 = dp.view({delta.size(0), delta.size(1), delta.size(2), delta.size(3), dp.size(-1)});
  dp5.sub_(delta).mul_(probs.view(dp5.sizes())).mul_(scale);
}

// One block of query rows [start, start + rows) of the sequence that begins at `first`: it reads
// the keys [first, start + rows).
struct QueryBlock {
  int64_t first, start, rows;
  int64_t keys() const { return start + rows - first; }
};

// Blocks of at most `block` rows, none across a sequence's end (`sequences`: AttentionMask's).
std::vector<QueryBlock> query_blocks(const std::vector<int64_t>& sequences, int64_t length, int64_t block) {
  const std::vector<int64_t> bounds = sequences.empty() ? std::vector<int64_t>{0, length} : sequences;
  std::vector<QueryBlock> out;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    for (int64_t start = bounds[s]; start < bounds[s + 1]; start += block) {
      out.push_back({bounds[s], start, std::min(block, bounds[s + 1] - start)});
    }
  }
  return out;
}

class BlockedAttention : public torch::autograd::Function<BlockedAttention> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& key_mask,
                               const std::vector<int64_t>& sequences, double scale, int64_t block) {
    const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
    const int64_t kv_heads = k.size(1), group = heads / kv_heads;
    const auto acc = logprob_dtype(q.scalar_type());
    auto qg = q.contiguous().view({batch, kv_heads, group, length, dim});
    auto out = torch::empty({batch, kv_heads, group, length, dim}, q.options());
    auto lse = torch::empty({batch, kv_heads, group, length}, q.options().dtype(acc));
    for (const QueryBlock& b : query_blocks(sequences, length, block)) {
      auto qb = qg.narrow(3, b.start, b.rows).reshape({batch, kv_heads, group * b.rows, dim});
      auto [probs, row_lse] = block_softmax(qb, k.narrow(2, b.first, b.keys()), key_mask.narrow(1, b.first, b.keys()),
                                            b.start - b.first, b.rows, scale, acc);
      out.narrow(3, b.start, b.rows)
          .copy_(torch::matmul(probs, v.narrow(2, b.first, b.keys())).view({batch, kv_heads, group, b.rows, dim}));
      lse.narrow(3, b.start, b.rows).copy_(row_lse);
    }
    ctx->save_for_backward({q, k, v, key_mask, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["block"] = block;
    ctx->saved_data["sequences"] = sequences;
    return out.view({batch, heads, length, dim});
  }

  // With P = softmax(S) saved only as lse: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)),
  // dQ = scale * dS K, dK = scale * dS^T Q, one block of query rows at a time.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &key_mask = saved[3], &out = saved[4], &lse = saved[5];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t block = ctx->saved_data["block"].toInt();
    const std::vector<int64_t> sequences = ctx->saved_data["sequences"].toIntVector();
    const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3);
    const int64_t kv_heads = k.size(1), group = heads / kv_heads;
    const auto dtype = q.scalar_type(), acc = lse.scalar_type();
    auto qg = q.contiguous().view({batch, kv_heads, group, length, dim});
    auto dout = grad_outputs[0].contiguous().view({batch, kv_heads, group, length, dim});
    auto delta = (dout.to(acc) * out.to(acc)).sum(-1, /*keepdim=*/true);  // [B, Hkv, G, T, 1]
    auto dq = torch::empty_like(qg);
    auto dk = torch::zeros(k.sizes(), k.options().dtype(acc));
    auto dv = torch::zeros(v.sizes(), v.options().dtype(acc));
    for (const QueryBlock& b : query_blocks(sequences, length, block)) {
      auto qb = qg.narrow(3, b.start, b.rows).reshape({batch, kv_heads, group * b.rows, dim});
      auto kb = k.narrow(2, b.first, b.keys()), vb = v.narrow(2, b.first, b.keys());
      auto probs = block_probs(qb, kb, key_mask.narrow(1, b.first, b.keys()), b.start - b.first, b.rows, scale,
                               lse.narrow(3, b.start, b.rows));
      auto dob = dout.narrow(3, b.start, b.rows).reshape({batch, kv_heads, group * b.rows, dim});
      dv.narrow(2, b.first, b.keys()).add_(torch::matmul(probs.to(dtype).transpose(-1, -2), dob).to(acc));
      auto dp = torch::matmul(dob, vb.transpose(-1, -2)).to(acc).contiguous();
      block_score_grad(probs, dp, delta.narrow(3, b.start, b.rows), scale);
      auto ds = dp.to(dtype);
      dq.narrow(3, b.start, b.rows).copy_(torch::matmul(ds, kb).view({batch, kv_heads, group, b.rows, dim}));
      dk.narrow(2, b.first, b.keys()).add_(torch::matmul(ds.transpose(-1, -2), qb).to(acc));
    }
    return {dq.view({batch, heads, length, dim}), dk.to(dtype), dv.to(dtype), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

// Which keys each query reads, [B, 1, 1, T, T]: its earlier tokens that are not padding (itself
// always), and in a packed row those of its own sequence only.
torch::Tensor allowed_mask(const AttentionMask& mask, int64_t length) {
  auto allowed = allowed_keys(mask.keys, 0, length);
  if (mask.packed()) {  // and of the query's own sequence
    auto sequence = torch::zeros({length}, torch::kInt64);
    for (size_t s = 1; s + 1 < mask.sequences.size(); ++s) sequence.narrow(0, mask.sequences[s], length - mask.sequences[s]).add_(1);
    sequence = sequence.to(mask.keys.device());
    allowed = allowed.logical_and(sequence.unsqueeze(1).eq(sequence.unsqueeze(0)));
  }
  return allowed;
}

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const AttentionMask& mask) {
  RLCPP_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && q.size(0) == k.size(0) &&
                  q.size(2) == k.size(2) && q.size(3) == k.size(3) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "attention: q {} must be [B, Hq, T, D] and k, v {} / {} [B, Hkv, T, D] with Hkv dividing Hq", q.sizes(),
              k.sizes(), v.sizes());
  const auto& key_mask = mask.keys;
  RLCPP_CHECK(key_mask.scalar_type() == torch::kBool && key_mask.dim() == 2 && key_mask.size(0) == q.size(0) &&
                  key_mask.size(1) == q.size(2),
              "attention: key_mask {} must be bool [B, T] for q {}", key_mask.sizes(), q.sizes());
  if (!mask.packed()) return;
  const auto& s = mask.sequences;
  bool rising = s.size() >= 2 && s.front() == 0 && s.back() == q.size(2);
  for (size_t i = 1; i < s.size(); ++i) rising = rising && s[i] > s[i - 1];
  RLCPP_CHECK(q.size(0) == 1 && rising, "attention: a packed row's sequence starts {} for q {} (one row; rising from 0 to T)",
              s, q.sizes());
}

}  // namespace

int64_t attention_block_rows(int64_t batch, int64_t heads, int64_t length) {
  const double per_row = 4.0 * static_cast<double>(std::max<int64_t>(1, batch * heads * length));
  const auto rows = static_cast<int64_t>(kBlockScoreBytes / per_row) / 16 * 16;
  return std::clamp<int64_t>(rows, 16, std::max<int64_t>(length, 1));
}

// Which implementation runs: PyTorch's scaled_dot_product_attention on CUDA (its fused kernels,
// the mask given as a boolean tensor), the blocked one above on the CPU. $RLCPP_ATTENTION (sdpa or
// blocked) chooses otherwise: the tests compare the two on the CPU.
bool use_sdpa(const torch::Tensor& q) {
  const char* chosen = std::getenv("RLCPP_ATTENTION");
  if (chosen == nullptr || *chosen == '\0') return q.is_cuda();
  const std::string name = chosen;
  if (name != "sdpa" && name != "blocked") throw_user_error("RLCPP_ATTENTION={}: use sdpa or blocked", name);
  return name == "sdpa";
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionMask& mask, double scale, int64_t block_rows) {
  check_shapes(q, k, v, mask);
  RLCPP_CHECK(block_rows >= 0, "attention: block_rows must be >= 0, got {}", block_rows);
  if (use_sdpa(q)) {  // the mask as the reference builds it, [B, 1, T, T]; the kv heads shared by enable_gqa
    return at::scaled_dot_product_attention(q, k, v, allowed_mask(mask, q.size(2)).squeeze(1), 0.0, /*is_causal=*/false,
                                            scale, /*enable_gqa=*/true);
  }
  if (block_rows == 0) block_rows = attention_block_rows(q.size(0), q.size(1), q.size(2));
  return BlockedAttention::apply(q, k.contiguous(), v.contiguous(), mask.keys.contiguous(), mask.sequences, scale,
                                 block_rows);
}

torch::Tensor causal_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const AttentionMask& mask, double scale) {
  check_shapes(q, k, v, mask);
  const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), dim = q.size(3), kv_heads = k.size(1);
  const int64_t group = heads / kv_heads;
  auto qg = q.reshape({batch, kv_heads, group * length, dim});
  auto scores = (torch::matmul(qg, k.transpose(-1, -2)) * scale).view({batch, kv_heads, group, length, length});
  scores = scores.masked_fill(allowed_mask(mask, length).logical_not(), -std::numeric_limits<double>::infinity());
  auto probs = torch::softmax(scores, -1, logprob_dtype(q.scalar_type())).to(q.scalar_type());
  auto out = torch::matmul(probs.view({batch, kv_heads, group * length, length}), v);
  return out.view({batch, heads, length, dim});
}

std::vector<int64_t> packed_sequences(const torch::Tensor& numbers) {
  RLCPP_CHECK(numbers.dim() == 1, "packed sequence numbers {} must be [T]", numbers.sizes());
  const auto row = numbers.to(torch::kCPU).to(torch::kInt64).contiguous();
  const int64_t* n = row.data_ptr<int64_t>();
  const int64_t length = row.numel();
  if (length == 0 || row.max().item<int64_t>() <= 1) return {};  // a plain mask (1 = token)
  std::vector<int64_t> starts;
  for (int64_t t = 0; t < length; ++t) {
    if (t == 0 || n[t] != n[t - 1]) starts.push_back(t);
  }
  starts.push_back(length);
  return starts;
}

}  // namespace rlcpp
