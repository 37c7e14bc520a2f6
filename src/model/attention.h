// Causal self-attention for training and scoring, computed in blocks of query rows so that memory
// grows linearly with the sequence length: neither the T x T scores nor the probabilities are kept
// for backward (FlashAttention's recomputation: only the output and each row's log-sum-exp are
// saved, and backward recomputes one block of scores at a time).
#pragma once

#include <torch/types.h>

#include <utility>
#include <vector>

namespace rlcpp {

// Which keys a query may read besides the causal order: not padding, and in a packed row (several
// sequences back to back in one row of a batch of one) only its own sequence's.
struct AttentionMask {
  AttentionMask(torch::Tensor keys, std::vector<int64_t> sequences = {})  // NOLINT: a plain key mask converts
      : keys(std::move(keys)), sequences(std::move(sequences)) {}
  torch::Tensor keys;              // [B, T] bool, false at padding
  std::vector<int64_t> sequences;  // a packed row: each sequence's first position, then T; empty: one per row
  bool packed() const { return !sequences.empty(); }
};

// q [B, Hq, T, D]; k, v [B, Hkv, T, D] with Hq a multiple of Hkv (query head h reads kv head
// h / (Hq / Hkv), as Hugging Face's repeat_kv). Query i attends to keys j <= i that are not padding
// and of its own sequence, and always to itself (a padded query's row stays finite; its output is
// never used). Softmax runs in fp32 for half types. Returns [B, Hq, T, D].
// block_rows: query rows per block; 0 picks them so one block's scores stay near 64 MiB.
// A packed row is the variable-length kernel: each sequence's blocks read only its own keys, so
// the work is the sum of the sequences' squared lengths, not the row's.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const AttentionMask& mask, double scale, int64_t block_rows = 0);

// The rows per block that `causal_attention` picks for this shape when block_rows is 0 (the memory
// preflight sizes the attention workspace with it).
int64_t attention_block_rows(int64_t batch, int64_t heads, int64_t length);

// The plain computation (T x T scores, autograd through softmax): the oracle of the tests.
torch::Tensor causal_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const AttentionMask& mask, double scale);

// The sequence starts of a packed row (AttentionMask::sequences) from its numbers [T]: 0 at
// padding, else the number of the token's sequence (1, 2, ...), each sequence one run (a run of
// padding is one too: its queries read only themselves). Empty for a plain mask (no number above 1).
std::vector<int64_t> packed_sequences(const torch::Tensor& numbers);

}  // namespace rlcpp
