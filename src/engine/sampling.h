// What a generation request asks for and what comes back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlcpp {

struct SamplingParams {
  double temperature = 1.0;     // 0: greedy
  int64_t top_k = 0;            // 0: off
  double top_p = 1.0;           // 1: off
  double min_p = 0.0;           // 0: off; keep tokens with p >= min_p * max p
  int64_t max_new_tokens = 256;
  int64_t logprobs = 0;         // the most likely tokens to report beside each sampled one (0: none)
  std::vector<int32_t> stop_token_ids;  // EOS and friends; the stop token is kept in the response
  std::vector<std::string> stop_strings;  // checked on decoded text; the response text ends before it
};

// kAbort: cancelled before it ended (a server's client that went away).
enum class FinishReason { kStop, kLength, kAbort };
inline const char* to_string(FinishReason r) {
  return r == FinishReason::kStop ? "stop" : r == FinishReason::kLength ? "length" : "abort";
}

// A token and its log-prob under the same distribution as the sampled token's.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  int64_t n = 1;       // samples (a group sharing the prompt)
  uint64_t seed = 0;   // sample s of this request draws from an RNG seeded by (seed, s)
};

// A run of inserted tokens in a multi-turn response (a tool's output, the template's turn markers):
// context the policy did not sample.
struct InsertedRun {
  int64_t start = 0;   // index into the response
  int64_t length = 0;
  bool operator==(const InsertedRun&) const = default;
};

// Partial rollouts: from response index `start` on, tokens were sampled by policy `version` (a
// weight update that reached the sequence while it was decoding).
struct VersionChange {
  int64_t start = 0;
  int64_t version = 0;
  bool operator==(const VersionChange&) const = default;
};

struct GeneratedSample {
  int64_t request = 0;  // index into the generate() call's requests
  int64_t sample = 0;   // 0..n-1 within the request
  std::vector<int32_t> token_ids;  // response tokens
  std::vector<float> logprobs;     // log softmax(logits / T) of each response token, before top-k/p
  // With SamplingParams::logprobs = k: the k most likely tokens at each step, most likely first.
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::string text;                // decoded response (stop string excluded) when a tokenizer is set
  FinishReason finish_reason = FinishReason::kLength;
  int64_t policy_version = 0;      // of the first response token's weights
  // The later versions that sampled its tokens, in order (empty: every token from policy_version).
  std::vector<VersionChange> version_changes;
  // Multi-turn (RolloutBackend::generate_turns): the inserted runs of token_ids, in order (their
  // logprobs are 0); empty: every token was sampled.
  std::vector<InsertedRun> inserted;
};

// The seed of sample `sample` of a request seeded `seed` (splitmix64 of both).
uint64_t sample_seed(uint64_t seed, int64_t sample);

}  // namespace rlcpp
