// Requests and engine settings the engine tests share: prompts of mixed lengths (groups and
// singles), a small paged cache, and the comparison of two generations' tokens.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace rlcpp::testing {

inline std::vector<GenerationRequest> mixed_requests(int64_t vocab, double temperature, int64_t max_new, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<GenerationRequest> requests;
  for (int64_t len : {1, 5, 17, 33, 8}) {
    GenerationRequest r;
    for (int64_t k = 0; k < len; ++k) r.prompt_ids.push_back(static_cast<int32_t>(rng() % vocab));
    r.params.temperature = temperature;
    r.params.max_new_tokens = max_new;
    r.n = len % 2 == 1 ? 3 : 1;  // groups and singles
    r.seed = rng();
    requests.push_back(r);
  }
  return requests;
}

inline void expect_same(const std::vector<GeneratedSample>& a, const std::vector<GeneratedSample>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].request, b[k].request) << what;
    EXPECT_EQ(a[k].sample, b[k].sample) << what;
    EXPECT_EQ(a[k].token_ids, b[k].token_ids) << what << " sample " << k;
    EXPECT_EQ(a[k].finish_reason, b[k].finish_reason) << what;
  }
}

inline EngineConfig small_engine(int64_t n_blocks = 256, int64_t block_size = 4) {
  EngineConfig c;
  c.n_blocks = n_blocks;
  c.block_size = block_size;
  return c;
}

}  // namespace rlcpp::testing
