// Gradients of token_logprobs: the chunked head against the plain one, the blocked attention
// against the plain one, and the whole model against central finite differences in double precision.
#include <torch/torch.h>

#include "model/attention.h"
#include "model/logprobs.h"
#include "model/transformer.h"
#include "finite_differences.h"
#include "test_util.h"

using namespace rlcpp;

TEST(ChunkedLogprobs, ValuesAndGradientsMatchReference) {
  torch::manual_seed(1);
  const int64_t n = 37, h = 16, v = 50;
  for (double temperature : {1.0, 0.6}) {
    for (int64_t chunk : {1, 8, 37, 64}) {
      auto hidden = torch::randn({n, h}, torch::requires_grad());
      auto weight = torch::randn({v, h}, torch::requires_grad());
      auto targets = torch::randint(0, v, {n}, torch::kInt64);
      targets[3] = -1;  // ignored position
      auto upstream = torch::randn({n});
      auto fast = token_logprobs_chunked(hidden, weight, targets, temperature, chunk);
      auto [gh_fast, gw_fast] = [&] {
        auto g = torch::autograd::grad({fast}, {hidden, weight}, {upstream});
        return std::make_pair(g[0], g[1]);
      }();
      auto slow = token_logprobs_reference(hidden, weight, targets, temperature);
      auto g = torch::autograd::grad({slow}, {hidden, weight}, {upstream});
      // fp32, same math in another order: agreement to a few ulps of the values involved.
      EXPECT_TRUE(torch::allclose(fast, slow, 1e-5, 1e-5)) << "chunk " << chunk;
      EXPECT_TRUE(torch::allclose(gh_fast, g[0], 1e-4, 1e-5)) << "chunk " << chunk;
      EXPECT_TRUE(torch::allclose(gw_fast, g[1], 1e-4, 1e-5)) << "chunk " << chunk;
      EXPECT_EQ(fast[3].item<float>(), 0.0f);
      // The entropy from the same pass equals the no-grad head's, and changes nothing else.
      torch::Tensor entropy;
      auto with_entropy = token_logprobs_chunked(hidden, weight, targets, temperature, chunk, &entropy);
      const auto plain = token_logprobs_entropy(hidden.detach(), weight.detach(), targets, temperature, chunk);
      EXPECT_TRUE(torch::equal(with_entropy.detach(), fast.detach())) << "chunk " << chunk;
      EXPECT_FALSE(entropy.requires_grad());
      EXPECT_TRUE(torch::allclose(entropy, plain.entropy, 1e-5, 1e-6)) << "chunk " << chunk;
      EXPECT_GT(entropy[0].item<float>(), 0.0f);
      EXPECT_EQ(entropy[3].item<float>(), 0.0f);
      auto g2 = torch::autograd::grad({with_entropy}, {hidden, weight}, {upstream});
      EXPECT_TRUE(torch::equal(g2[0], gh_fast) && torch::equal(g2[1], gw_fast)) << "chunk " << chunk;
    }
  }
}

// The blocked attention (rows recomputed in backward from the saved log-sum-exp) against T x T
// scores with autograd: grouped heads, left padding, block sizes from one row to the whole sequence.
TEST(BlockedAttention, ValuesAndGradientsMatchReference) {
  torch::manual_seed(3);
  const int64_t batch = 2, heads = 6, kv_heads = 2, length = 13, dim = 8;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  auto key_mask = torch::ones({batch, length}, torch::kBool);
  key_mask[1].narrow(0, 0, 4).fill_(false);  // row 1 left-padded by 4
  for (auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
    auto opts = torch::TensorOptions().dtype(dtype);
    auto q = torch::randn({batch, heads, length, dim}, opts).requires_grad_();
    auto k = torch::randn({batch, kv_heads, length, dim}, opts).requires_grad_();
    auto v = torch::randn({batch, kv_heads, length, dim}, opts).requires_grad_();
    auto upstream = torch::randn({batch, heads, length, dim}, opts);
    auto slow = causal_attention_reference(q, k, v, key_mask, scale);
    auto g = torch::autograd::grad({slow}, {q, k, v}, {upstream});
    // fp64: the same math in another order; fp32 and bf16: rounding of the inputs' precision.
    const double tol = dtype == torch::kFloat64 ? 1e-12 : dtype == torch::kFloat32 ? 1e-5 : 3e-2;
    for (int64_t block : {1, 3, 5, 13, 0}) {
      SCOPED_TRACE("dtype " + std::string(c10::toString(dtype)) + ", block " + std::to_string(block));
      auto fast = causal_attention(q, k, v, key_mask, scale, block);
      auto gf = torch::autograd::grad({fast}, {q, k, v}, {upstream});
      auto close = [&](const torch::Tensor& a, const torch::Tensor& b) {
        return torch::allclose(a.to(torch::kFloat64), b.to(torch::kFloat64), tol, tol);
      };
      EXPECT_TRUE(close(fast, slow)) << (fast - slow).abs().max().item<double>();
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(close(gf[i], g[i])) << "input " << i << ": " << (gf[i] - g[i]).abs().max().item<double>();
    }
  }
  // A padded query attends to itself only: its output is its own value.
  auto q = torch::randn({batch, heads, length, dim}, torch::kFloat64);
  auto k = torch::randn({batch, kv_heads, length, dim}, torch::kFloat64);
  auto v = torch::randn({batch, kv_heads, length, dim}, torch::kFloat64);
  auto out = causal_attention(q, k, v, key_mask, scale, 4);
  EXPECT_TRUE(torch::allclose(out[1][0][2], v[1][0][2]));
  EXPECT_TRUE(torch::allclose(out[1][5][0], v[1][1][0]));  // query head 5 reads kv head 1
  EXPECT_EQ(attention_block_rows(1, 14, 8192), 144);         // ~64 MiB of fp32 scores per block
  EXPECT_EQ(attention_block_rows(8, 14, 320), 320);          // short sequences: one block
  EXPECT_THROW_MSG(causal_attention(q, k, v, key_mask.to(torch::kInt64), scale), InternalError, "key_mask");
}

// The variable-length kernel: one packed row of four sequences and trailing padding equals each
// sequence's attention computed alone, and the T x T reference with the same mask, in values and
// gradients (fp64 to 1e-12, fp32 to 1e-5), blocks of one row to more than a sequence.
TEST(BlockedAttention, PackedRowEqualsEachSequenceAlone) {
  torch::manual_seed(5);
  const std::vector<int64_t> lengths = {5, 1, 9, 3};
  const int64_t heads = 4, kv_heads = 2, dim = 8, pad = 2;
  int64_t length = pad;
  for (auto n : lengths) length += n;
  auto numbers = torch::zeros({length}, torch::kInt64);
  int64_t at = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    numbers.narrow(0, at, lengths[s]).fill_(static_cast<int64_t>(s) + 1);
    at += lengths[s];
  }
  const auto sequences = packed_sequences(numbers);
  ASSERT_EQ(sequences, (std::vector<int64_t>{0, 5, 6, 15, 18, 20}));
  EXPECT_TRUE(packed_sequences(torch::tensor({0, 0, 1, 1, 1})).empty());  // a plain left-padded mask
  const AttentionMask mask(numbers.ne(0).unsqueeze(0), sequences);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    auto opts = torch::TensorOptions().dtype(dtype);
    auto q = torch::randn({1, heads, length, dim}, opts).requires_grad_();
    auto k = torch::randn({1, kv_heads, length, dim}, opts).requires_grad_();
    auto v = torch::randn({1, kv_heads, length, dim}, opts).requires_grad_();
    auto upstream = torch::randn({1, heads, length, dim}, opts);
    upstream.narrow(2, length - pad, pad).zero_();  // padding's outputs are never used
    // Each sequence alone, concatenated; the padding's queries read themselves only (their value).
    std::vector<torch::Tensor> parts;
    at = 0;
    for (auto n : lengths) {
      parts.push_back(causal_attention_reference(q.narrow(2, at, n), k.narrow(2, at, n), v.narrow(2, at, n),
                                                 torch::ones({1, n}, torch::kBool), scale));
      at += n;
    }
    parts.push_back(v.narrow(2, length - pad, pad).repeat_interleave(heads / kv_heads, 1));
    auto alone = torch::cat(parts, 2);
    auto g_alone = torch::autograd::grad({alone}, {q, k, v}, {upstream});
    auto reference = causal_attention_reference(q, k, v, mask, scale);
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
    auto close = [&](const torch::Tensor& a, const torch::Tensor& b) {
      return torch::allclose(a.to(torch::kFloat64), b.to(torch::kFloat64), tol, tol);
    };
    EXPECT_TRUE(close(reference, alone)) << (reference - alone).abs().max().item<double>();
    for (int64_t block : {1, 2, 4, 16, 0}) {
      SCOPED_TRACE("dtype " + std::string(c10::toString(dtype)) + ", block " + std::to_string(block));
      auto fast = causal_attention(q, k, v, mask, scale, block);
      auto g = torch::autograd::grad({fast}, {q, k, v}, {upstream});
      EXPECT_TRUE(close(fast, alone)) << (fast - alone).abs().max().item<double>();
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(close(g[i], g_alone[i])) << "input " << i << ": " << (g[i] - g_alone[i]).abs().max().item<double>();
    }
  }
  auto q = torch::randn({2, heads, length, dim});
  auto k = torch::randn({2, kv_heads, length, dim});
  EXPECT_THROW_MSG(causal_attention(q, k, k, AttentionMask(torch::ones({2, length}, torch::kBool), sequences), scale),
                   InternalError, "packed row");
}

// PyTorch's scaled_dot_product_attention, what CUDA runs (RLCPP_ATTENTION=sdpa chooses it here):
// a left-padded batch and a packed row of three sequences with trailing padding give the reference's
// values and gradients (fp64 to 1e-12, fp32 to 1e-5, bf16 to 3e-2), grouped kv heads included.
TEST(SdpaAttention, ValuesAndGradientsMatchReference) {
  torch::manual_seed(7);
  const int64_t heads = 6, kv_heads = 2, length = 13, dim = 8;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  auto padded = torch::ones({2, length}, torch::kBool);
  padded[1].narrow(0, 0, 4).fill_(false);
  auto numbers = torch::tensor({1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 0, 0}, torch::kInt64);
  const std::vector<std::pair<std::string, AttentionMask>> masks = {
      {"padded", AttentionMask(padded)}, {"packed", AttentionMask(numbers.ne(0).unsqueeze(0), packed_sequences(numbers))}};
  ::setenv("RLCPP_ATTENTION", "sdpa", 1);
  for (const auto& [name, mask] : masks) {
    const int64_t batch = mask.keys.size(0);
    for (auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
      SCOPED_TRACE(name + " " + std::string(c10::toString(dtype)));
      auto opts = torch::TensorOptions().dtype(dtype);
      auto q = torch::randn({batch, heads, length, dim}, opts).requires_grad_();
      auto k = torch::randn({batch, kv_heads, length, dim}, opts).requires_grad_();
      auto v = torch::randn({batch, kv_heads, length, dim}, opts).requires_grad_();
      auto upstream = torch::randn({batch, heads, length, dim}, opts);
      auto slow = causal_attention_reference(q, k, v, mask, scale);
      auto g = torch::autograd::grad({slow}, {q, k, v}, {upstream});
      auto fast = causal_attention(q, k, v, mask, scale);
      // The graph is PyTorch's, not the blocked implementation's own node.
      EXPECT_EQ(fast.grad_fn()->name().find("BlockedAttention"), std::string::npos) << fast.grad_fn()->name();
      auto gf = torch::autograd::grad({fast}, {q, k, v}, {upstream});
      const double tol = dtype == torch::kFloat64 ? 1e-12 : dtype == torch::kFloat32 ? 1e-5 : 3e-2;
      auto close = [&](const torch::Tensor& a, const torch::Tensor& b) {
        return torch::allclose(a.to(torch::kFloat64), b.to(torch::kFloat64), tol, tol);
      };
      EXPECT_TRUE(close(fast, slow)) << (fast - slow).abs().max().item<double>();
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(close(gf[i], g[i])) << "input " << i << ": " << (gf[i] - g[i]).abs().max().item<double>();
    }
  }
  auto q = torch::randn({2, heads, length, dim}).requires_grad_();
  auto k = torch::randn({2, kv_heads, length, dim});
  ::setenv("RLCPP_ATTENTION", "blocked", 1);  // (and the check above tells the two apart)
  EXPECT_NE(causal_attention(q, k, k, AttentionMask(padded), scale).grad_fn()->name().find("BlockedAttention"), std::string::npos);
  ::setenv("RLCPP_ATTENTION", "flash", 1);
  EXPECT_THROW_MSG(causal_attention(q, k, k, AttentionMask(padded), scale), UserError, "RLCPP_ATTENTION=flash");
  ::unsetenv("RLCPP_ATTENTION");
}

// A packed row through the whole model (every fixture, fp64): the hidden states of each sequence
// and the log-probs' gradient equal those of the sequences run as a right-padded batch, with and
// without gradient checkpointing.
TEST(ModelGradients, PackedRowEqualsThePaddedBatch) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    for (bool checkpointing : {false, true}) {
      SCOPED_TRACE(dir.string() + (checkpointing ? ", checkpointing" : ""));
      ModelOptions options;
      options.dtype = torch::kFloat64;
      options.gradient_checkpointing = checkpointing;
      auto model = Transformer::from_pretrained(dir, options);
      model->train();
      torch::manual_seed(6);
      const int64_t vocab = model->config().vocab_size;
      const std::vector<int64_t> lengths = {6, 2, 9};
      const int64_t longest = 9, total = 17;
      auto padded_ids = torch::zeros({3, longest}, torch::kInt64), padded_mask = torch::zeros({3, longest}, torch::kInt64);
      auto packed_ids = torch::randint(0, vocab, {1, total}, torch::kInt64), numbers = torch::zeros({1, total}, torch::kInt64);
      auto targets = torch::randint(0, vocab, {1, total}, torch::kInt64), padded_targets = torch::full({3, longest}, -1, torch::kInt64);
      int64_t at = 0;
      for (int64_t s = 0; s < 3; ++s) {
        const int64_t n = lengths[static_cast<size_t>(s)];
        padded_ids[s].narrow(0, 0, n).copy_(packed_ids[0].narrow(0, at, n));
        padded_targets[s].narrow(0, 0, n).copy_(targets[0].narrow(0, at, n));
        padded_mask[s].narrow(0, 0, n).fill_(1);
        numbers[0].narrow(0, at, n).fill_(s + 1);
        at += n;
      }
      auto h_packed = model->hidden_states(packed_ids, numbers);
      auto h_padded = model->hidden_states(padded_ids, padded_mask);
      at = 0;
      for (int64_t s = 0; s < 3; ++s) {
        const int64_t n = lengths[static_cast<size_t>(s)];
        EXPECT_TRUE(torch::allclose(h_packed[0].narrow(0, at, n), h_padded[s].narrow(0, 0, n), 1e-12, 1e-12)) << "sequence " << s;
        at += n;
      }
      auto grads = [&](const torch::Tensor& ids, const torch::Tensor& mask, const torch::Tensor& t) {
        model->zero_grad();
        model->token_logprobs(ids, t, 0.9, mask).sum().backward();
        std::vector<torch::Tensor> out;
        for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
        return out;
      };
      const auto g_packed = grads(packed_ids, numbers, targets), g_padded = grads(padded_ids, padded_mask, padded_targets);
      for (size_t k = 0; k < g_packed.size(); ++k) {
        EXPECT_TRUE(torch::allclose(g_packed[k], g_padded[k], 1e-12, 1e-12)) << "parameter " << k;
      }
    }
  }
}

TEST(ModelGradients, TokenLogprobsMatchFiniteDifferencesInDouble) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    ModelOptions options;
    options.dtype = torch::kFloat64;
    options.logprob_chunk_tokens = 7;  // several chunks, the last one partial
    auto model = Transformer::from_pretrained(dir, options);
    torch::manual_seed(2);
    const int64_t vocab = model->config().vocab_size;
    auto ids = torch::randint(0, vocab, {2, 9}, torch::kInt64);
    auto targets = torch::randint(0, vocab, {2, 9}, torch::kInt64);
    auto mask = torch::ones({2, 9}, torch::kInt64);
    mask[1].narrow(0, 0, 3).fill_(0);  // left padding in row 1
    targets[1].narrow(0, 0, 3).fill_(-1);
    auto weights = torch::randn({2, 9}, torch::kFloat64);
    const double temperature = 0.8;
    auto loss_fn = [&] { return (model->token_logprobs(ids, targets, temperature, mask) * weights).sum(); };

    model->zero_grad();
    loss_fn().backward();
    const int checked = rlcpp::testing::expect_finite_difference_gradients(model->named_weights(), loss_fn);
    EXPECT_GT(checked, 20);
  }
}

// The embedding's gradient goes straight into .grad (transformer.cpp's EmbeddingIntoGrad): the
// entries of rows the input uses (one token twice) against finite differences, with .grad absent
// at first; a second backward accumulates onto it (twice the first); a frozen embedding gets none.
TEST(ModelGradients, EmbeddingRowsOfTheInputMatchFiniteDifferences) {
  for (const auto& dir : rlcpp::testing::fixture_dirs()) {
    SCOPED_TRACE(dir.string());
    ModelOptions options;
    options.dtype = torch::kFloat64;
    auto model = Transformer::from_pretrained(dir, options);
    torch::manual_seed(4);
    const int64_t vocab = model->config().vocab_size, hidden = model->config().hidden_size;
    auto ids = torch::randint(0, vocab, {2, 6}, torch::kInt64);
    ids[1][4] = ids[0][1].item<int64_t>();
    auto targets = torch::randint(0, vocab, {2, 6}, torch::kInt64);
    auto weights = torch::randn({2, 6}, torch::kFloat64);
    auto loss_fn = [&] { return (model->token_logprobs(ids, targets) * weights).sum(); };
    auto embedding = model->model->embed_tokens->weight;
    ASSERT_FALSE(embedding.grad().defined());
    loss_fn().backward();
    ASSERT_TRUE(embedding.grad().defined());
    const auto first = embedding.grad().clone();
    torch::NoGradGuard no_grad;
    for (int64_t row : {ids[0][1].item<int64_t>(), ids[1][0].item<int64_t>()}) {
      for (int64_t col : {int64_t{0}, hidden - 1}) {
        auto entry = embedding[row][col];
        const double saved = entry.item<double>(), eps = 1e-6;
        entry.fill_(saved + eps);
        const double up = loss_fn().item<double>();
        entry.fill_(saved - eps);
        const double down = loss_fn().item<double>();
        entry.fill_(saved);
        const double numeric = (up - down) / (2 * eps);
        EXPECT_NEAR(first[row][col].item<double>(), numeric, 1e-6 + 1e-5 * std::abs(numeric)) << row << "," << col;
      }
    }
    {
      torch::AutoGradMode grad(true);
      loss_fn().backward();
    }
    EXPECT_TRUE(torch::allclose(embedding.grad(), first * 2, 1e-12, 1e-12));
    embedding.mutable_grad() = torch::Tensor();
    embedding.set_requires_grad(false);
    {
      torch::AutoGradMode grad(true);
      auto logp = model->token_logprobs(ids, targets);
      if (logp.requires_grad()) (logp * weights).sum().backward();
    }
    EXPECT_FALSE(embedding.grad().defined());
  }
}

// The fused loss head against the chunked head followed by the same per-token loss under autograd:
// loss, log-probs, entropy and the gradients of hidden and weight (fp64, chunks of 1 row to all),
// and a frozen weight gets no gradient.
TEST(FusedLossHead, ValuesAndGradientsMatchTheChunkedHead) {
  torch::manual_seed(7);
  const int64_t n = 23, h = 12, v = 41;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const auto a = torch::randn({n}, opts), b = torch::randn({n}, opts);
  // Per token and nonlinear in its own log-prob, as the clipped losses are.
  auto loss_of = [&](const torch::Tensor& logp) { return (a * logp.exp() + b * logp * logp).sum(); };
  const auto targets = torch::randint(0, v, {n}, torch::kInt64);
  for (bool frozen : {false, true}) {
    for (int64_t chunk : {1, 4, 23, 64}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (frozen ? ", frozen weight" : ""));
      auto hidden = torch::randn({n, h}, opts).requires_grad_();
      auto weight = torch::randn({v, h}, opts).requires_grad_(!frozen);
      auto fused = fused_token_loss_head(hidden, weight, targets, 0.7, chunk, loss_of, true);
      auto fused_grads = torch::autograd::grad({fused.loss}, frozen ? std::vector<torch::Tensor>{hidden}
                                                                    : std::vector<torch::Tensor>{hidden, weight});
      torch::Tensor entropy;
      auto logp = token_logprobs_chunked(hidden, weight, targets, 0.7, chunk, &entropy);
      auto loss = loss_of(logp);
      auto grads = torch::autograd::grad({loss}, frozen ? std::vector<torch::Tensor>{hidden}
                                                        : std::vector<torch::Tensor>{hidden, weight});
      EXPECT_NEAR(fused.loss.item<double>(), loss.item<double>(), 1e-10);
      EXPECT_TRUE(torch::allclose(fused.logprobs, logp.detach(), 1e-12, 1e-12));
      EXPECT_TRUE(torch::allclose(fused.entropy, entropy, 1e-12, 1e-12));
      EXPECT_FALSE(fused.logprobs.requires_grad());
      for (size_t k = 0; k < grads.size(); ++k) {
        EXPECT_GT(grads[k].abs().max().item<double>(), 0.0);
        EXPECT_TRUE(torch::allclose(fused_grads[k], grads[k], 1e-10, 1e-12)) << "gradient " << k;
      }
    }
  }
}
