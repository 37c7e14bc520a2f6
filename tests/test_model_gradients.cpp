// Gradients of token_logprobs: the chunked head against the plain one, and the whole model
// against central finite differences in double precision.
#include <torch/torch.h>

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
