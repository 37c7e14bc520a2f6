#include "engine/kv_cache.h"

#include <sys/mman.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "model/kernel_linear.h"
#include "util/error.h"

namespace rlcpp {

namespace {

// Zeros on the CPU as a fresh anonymous mapping: the kernel's zero pages, each faulted in when a
// block on it is first written. So a large --kv-cache-mb costs neither start-up time (clearing
// 1 GiB with torch::zeros took 9-15 s of page faults on a 2-core VM) nor resident memory for the
// blocks a run never uses (the block manager hands out the lowest blocks first and reuses the last
// freed). Elsewhere torch::zeros.
torch::Tensor zero_pages(const std::vector<int64_t>& shape, const torch::TensorOptions& options) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  if (!options.device().is_cpu() || bytes == 0) return torch::zeros(shape, options);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw_user_error("the KV cache: cannot map {} MiB ({}); lower --kv-cache-mb", bytes >> 20, std::strerror(errno));
  }
  return torch::from_blob(p, shape, [bytes](void* q) { munmap(q, bytes); }, options);
}

}  // namespace

KvCache::KvCache(const ModelConfig& config, int64_t kv_heads, int64_t n_blocks, int64_t block_size,
                 torch::ScalarType dtype, torch::Device device)
    : n_blocks_(n_blocks), block_size_(block_size) {
  auto options = torch::TensorOptions().dtype(dtype).device(device);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    k_.push_back(zero_pages({n_blocks * block_size, kv_heads, config.head_dim}, options));
    v_.push_back(zero_pages({n_blocks * block_size, kv_heads, config.head_dim}, options));
  }
}

int64_t KvCache::blocks_for_bytes(const ModelConfig& config, int64_t kv_heads, int64_t block_size,
                                  torch::ScalarType dtype, int64_t bytes) {
  const int64_t per_block = 2 * config.num_hidden_layers * block_size * kv_heads * config.head_dim *
                            static_cast<int64_t>(c10::elementSize(dtype));
  return bytes / per_block;
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const auto& t : k_) total += t.numel() * t.element_size();
  for (const auto& t : v_) total += t.numel() * t.element_size();
  return total;
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  for (size_t l = 0; l < k_.size(); ++l) {
    k_[l].narrow(0, dst * block_size_, block_size_).copy_(k_[l].narrow(0, src * block_size_, block_size_));
    v_[l].narrow(0, dst * block_size_, block_size_).copy_(v_[l].narrow(0, src * block_size_, block_size_));
  }
}

bool paged_kernel_applies(const KvCache& cache, torch::ScalarType dtype) {
  if (!kernels_active() || dtype != torch::kFloat32 || cache.n_blocks() == 0 || !cache.k(0).device().is_cpu()) return false;
  const auto kv = cache.k(0).scalar_type();
  return kv == torch::kFloat32 || kv == torch::kBFloat16 || kv == torch::kFloat16;
}

namespace {

kernels::WeightType kernel_type(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16: return kernels::WeightType::bf16;
    case torch::kFloat16: return kernels::WeightType::f16;
    default: return kernels::WeightType::f32;
  }
}

}  // namespace

torch::Tensor PagedAttention::attend(int64_t layer, const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v) {
  auto& k_cache = cache_.k(layer);
  auto& v_cache = cache_.v(layer);
  k_cache.index_copy_(0, step_.slot_mapping, k.to(k_cache.scalar_type()));
  v_cache.index_copy_(0, step_.slot_mapping, v.to(v_cache.scalar_type()));
  if (step_.kernel) {
    const int64_t tokens = q.size(0), n_heads = q.size(1), dim = q.size(2);
    const auto qc = q.contiguous();
    auto out = torch::empty({tokens, n_heads * dim}, q.options());
    kernels::PagedQueries queries{tokens, step_.token_pos.data(), step_.token_table.data(), step_.blocks.data()};
    kernels::PagedKv kv{k_cache.data_ptr(), v_cache.data_ptr(), kernel_type(k_cache.scalar_type()), cache_.block_size()};
    kernels::paged_attention(qc.data_ptr<float>(), queries, kv, n_heads, k.size(1), dim,
                             static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim))), out.data_ptr<float>());
    return out;
  }
  const int64_t batch = step_.key_slots.size(0), keys = step_.key_slots.size(1), queries = step_.query_index.size(1);
  const int64_t n_heads = q.size(1), n_kv = k.size(1), dim = q.size(2), group = n_heads / n_kv;
  // Context of each sequence [B, Hkv, Lk, D] and its new queries [B, Hkv, G*Tq, D] (grouped as the model does).
  auto gather = [&](const torch::Tensor& cache) {  // in q's dtype when the cache stores another
    return cache.index_select(0, step_.key_slots.view({-1})).to(q.scalar_type()).view({batch, keys, n_kv, dim}).permute({0, 2, 1, 3});
  };
  auto keys_t = gather(k_cache);
  auto values = gather(v_cache);
  auto queries_t = q.index_select(0, step_.query_index.view({-1}))
                       .view({batch, queries, n_heads, dim})
                       .permute({0, 2, 1, 3})
                       .reshape({batch, n_kv, group * queries, dim});
  auto scores = torch::matmul(queries_t, keys_t.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(dim)));
  // Allowed: a real key at a position not after the query's.
  auto key_pos = torch::arange(keys, step_.query_pos.options()).view({1, 1, keys});
  auto allowed = step_.key_valid.unsqueeze(1).logical_and(key_pos.le(step_.query_pos.unsqueeze(2)));  // [B, Tq, Lk]
  allowed = allowed.logical_or(step_.query_pos.lt(0).unsqueeze(2));  // padded queries: keep softmax finite
  auto mask = torch::zeros(allowed.sizes(), scores.options()).masked_fill_(allowed.logical_not(),
                                                                           -std::numeric_limits<double>::infinity());
  scores = scores.view({batch, n_kv, group, queries, keys}) + mask.view({batch, 1, 1, queries, keys});
  const auto compute = q.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  auto probs = torch::softmax(scores, -1, compute).to(q.scalar_type());
  auto out = torch::matmul(probs.view({batch, n_kv, group * queries, keys}), values);  // [B, Hkv, G*Tq, D]
  out = out.view({batch, n_heads, queries, dim}).permute({0, 2, 1, 3}).reshape({batch * queries, n_heads * dim});
  return out.index_select(0, step_.packed_index);
}

}  // namespace rlcpp
