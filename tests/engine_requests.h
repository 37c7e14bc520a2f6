// Requests and engine settings the engine tests share: prompts of mixed lengths (groups and
// singles), a small paged cache, and the comparison of two generations' tokens.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace rlcpp::testing {

// A byte-level tokenizer over ids 0..255, one token per byte (for the stop-string checks).
inline std::shared_ptr<Tokenizer> byte_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(byte_to_char()[b], &s);
    vocab[s] = b;
  }
  nlohmann::json tj = {{"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", false}}},
                       {"decoder", {{"type", "ByteLevel"}}},
                       {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  return std::make_shared<Tokenizer>(tj.dump(), "", "bytes");
}

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
