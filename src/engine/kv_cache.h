// The paged KV cache tensors and attention over them (pure LibTorch, any device).
//
// Keys and values of layer l live in k[l], v[l]: [n_blocks * block_size, Hkv, D], one row per token
// slot; slot = block * block_size + offset. PagedAttention implements the model's AttentionBackend
// for one step: it writes the step's new keys/values into their slots and attends over each
// sequence's context through its block table, causal in position: on the CPU by a kernel that
// reads the blocks in place, elsewhere by gathering the context and LibTorch's matmuls.
#pragma once

#include <torch/types.h>

#include <vector>

#include "model/attention_backend.h"
#include "model/model_config.h"

namespace rlcpp {

class KvCache {
 public:
  // `kv_heads` per layer: the model's, or this rank's part of them under tensor parallelism.
  KvCache(const ModelConfig& config, int64_t kv_heads, int64_t n_blocks, int64_t block_size, torch::ScalarType dtype,
          torch::Device device);
  // Blocks of `kv_heads` per layer that fit in `bytes` for this model.
  static int64_t blocks_for_bytes(const ModelConfig& config, int64_t kv_heads, int64_t block_size, torch::ScalarType dtype,
                                  int64_t bytes);

  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t bytes() const;
  torch::Tensor& k(int64_t layer) { return k_[static_cast<size_t>(layer)]; }
  const torch::Tensor& k(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  torch::Tensor& v(int64_t layer) { return v_[static_cast<size_t>(layer)]; }
  void copy_block(int32_t src, int32_t dst);  // every layer

 private:
  int64_t n_blocks_, block_size_;
  std::vector<torch::Tensor> k_, v_;
};

// The attention metadata of one step, built by the runner from the scheduled batch.
struct PagedStep {
  torch::Tensor slot_mapping;  // [T] int64: the slot each new token's key/value goes to
  // The CPU kernel's form (kernels/attention.h): each new token's position and the offset of its
  // sequence's block table in `blocks` (the tables concatenated).
  bool kernel = false;
  std::vector<int32_t> token_pos;
  std::vector<int64_t> token_table;
  std::vector<int32_t> blocks;
  // LibTorch's form (other devices and dtypes): padded per-sequence tensors.
  torch::Tensor query_index;   // [B, Tq] int64: packed row of each sequence's t-th new token (padded with 0)
  torch::Tensor query_pos;     // [B, Tq] int64: its position (-1 for padding)
  torch::Tensor key_slots;     // [B, Lk] int64: slot of each context position (padded with 0)
  torch::Tensor key_valid;     // [B, Lk] bool
  torch::Tensor packed_index;  // [T] int64: row of the padded [B * Tq] output for each packed token
};

// Whether a step of a model computing in `dtype` attends through the CPU kernel (inside a
// KernelScope, on the CPU, fp32 compute) rather than LibTorch's gather and matmuls.
bool paged_kernel_applies(const KvCache& cache, torch::ScalarType dtype);

class PagedAttention : public AttentionBackend {
 public:
  PagedAttention(KvCache& cache, const PagedStep& step) : cache_(cache), step_(step) {}
  torch::Tensor attend(int64_t layer, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) override;

 private:
  KvCache& cache_;
  const PagedStep& step_;
};

}  // namespace rlcpp
