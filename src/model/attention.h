// Causal self-attention for training and scoring, computed in blocks of query rows so that memory
// grows linearly with the sequence length: neither the T x T scores nor the probabilities are kept
// for backward (FlashAttention's recomputation: only the output and each row's log-sum-exp are
// saved, and backward recomputes one block of scores at a time).
#pragma once

#include <torch/types.h>

namespace rlcpp {

// q [B, Hq, T, D]; k, v [B, Hkv, T, D] with Hq a multiple of Hkv (query head h reads kv head
// h / (Hq / Hkv), as Hugging Face's repeat_kv); key_mask [B, T] bool, false at padding. Query i
// attends to keys j <= i that are not padding, and always to itself (a padded query's row stays
// finite; its output is never used). Softmax runs in fp32 for half types. Returns [B, Hq, T, D].
// block_rows: query rows per block; 0 picks them so one block's scores stay near 64 MiB.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_mask, double scale, int64_t block_rows = 0);

// The rows per block that `causal_attention` picks for this shape when block_rows is 0 (the memory
// preflight sizes the attention workspace with it).
int64_t attention_block_rows(int64_t batch, int64_t heads, int64_t length);

// The plain computation (T x T scores, autograd through softmax): the oracle of the tests.
torch::Tensor causal_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& key_mask, double scale);

}  // namespace rlcpp
