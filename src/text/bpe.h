// The BPE model of tokenizer.json: vocabulary, merge ranks, ignore_merges, byte_fallback, unk token,
// continuing_subword_prefix / end_of_word_suffix. Merges are applied lowest rank first, leftmost on
// ties (Hugging Face's Word::merge_all), in O(n log n) per word with a bounded per-word cache.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rlcpp {

// Token ids are below this (2^24; the largest vocabularies have about 2^18 tokens): a larger id in
// a tokenizer.json is an error, not a giant allocation.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

class BpeModel {
 public:
  // Builds from the "model" object; a non-BPE model type is a UserError naming it.
  BpeModel(const nlohmann::json& json, const std::string& where);

  // Appends the ids of one pre-token. `byte_level`: the piece is raw bytes to be read through
  // GPT-2's byte-level alphabet (the vocabulary is in that alphabet).
  void tokenize(std::string_view piece, bool byte_level, std::vector<int32_t>* out) const;

  std::optional<int32_t> token_to_id(const std::string& token) const;
  // The vocabulary string of `id` (empty if the id is not in the BPE vocabulary).
  const std::string& id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  void merge_word(const std::string& word, std::vector<int32_t>* out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) → rank, merged id
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
  int32_t byte_fallback_ids_[256];

  static constexpr size_t kCacheCapacity = 1 << 16;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace rlcpp
