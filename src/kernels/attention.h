// Decode and prefill attention over a paged KV cache, read in place: each query token walks its
// sequence's block table and attends to every key at a position not after its own (causal), with
// no gather of the context into a contiguous tensor. GQA: the query heads of one KV head share
// each key and value load. Scores, softmax and the weighted sum are in fp32; the cache may hold
// fp32, bf16 or fp16. Work is split over (token, KV head) pairs on the kernel thread pool.
//
// Same dispatch as matmul.h: one Highway source, the best SIMD target picked at run time.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace rlcpp::kernels {

// The cache of one layer: keys and values [n_slots, n_kv_heads, head_dim], slot = block *
// block_size + offset, elements of `type`.
struct PagedKv {
  const void* k = nullptr;
  const void* v = nullptr;
  WeightType type = WeightType::f32;
  int64_t block_size = 16;
};

// Where each of the step's query tokens sits: token t attends keys at positions 0..pos[t] of the
// sequence whose block table starts at blocks + table[t] (its keys already written to the cache).
struct PagedQueries {
  int64_t n_tokens = 0;
  const int32_t* pos = nullptr;     // [n_tokens]
  const int64_t* table = nullptr;   // [n_tokens] offset into blocks
  const int32_t* blocks = nullptr;  // block ids of every sequence's table, concatenated
};

// out[t, h * D .. (h + 1) * D) = softmax(q[t, h] · K^T * scale) V for each query head h, with
// q [n_tokens, n_heads, head_dim] and out [n_tokens, n_heads * head_dim] dense fp32.
void paged_attention(const float* q, const PagedQueries& queries, const PagedKv& kv, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, float scale, float* out, ThreadPool* pool = nullptr);

}  // namespace rlcpp::kernels
