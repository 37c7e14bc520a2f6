// Tokenizer: Hugging Face `tokenizer.json` byte-level BPE (GPT-2, Qwen2/2.5/3, Llama 3.x, DeepSeek)
// plus `tokenizer_config.json` (chat template, special tokens), in C++ with no Python.
//
// encode: added tokens are matched first (leftmost-longest, with lstrip/rstrip/single_word; the
// `normalized` ones after normalisation), the rest is normalised, pre-tokenised and run through BPE;
// with add_special_tokens the post-processor adds BOS where the model wants one.
// decode: ids → token strings → byte-level decoder → UTF-8 (invalid bytes become U+FFFD).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rlcpp {

class BpeModel;
class Normalizer;
class PreTokenizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// What tokenizer_config.json adds: special token strings and the chat template.
struct TokenizerConfig {
  std::string chat_template;  // empty: the model has none (ChatML is used, with a log line)
  std::string bos_token, eos_token, pad_token, unk_token;  // empty when absent
  std::string tokenizer_class;
};

class Tokenizer {
 public:
  // Loads `dir/tokenizer.json` and, when present, `dir/tokenizer_config.json`. A component rlcpp
  // cannot run (Unigram, WordPiece, Metaspace, ...) is a UserError naming it.
  static std::shared_ptr<Tokenizer> from_dir(const std::filesystem::path& dir);
  // From the parsed JSON of tokenizer.json (and optionally tokenizer_config.json); `where` names the source.
  Tokenizer(const std::string& tokenizer_json, const std::string& config_json, const std::string& where);
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // The token's string as in the vocabulary (byte-level alphabet) or the added token's content.
  std::string id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(const std::string& token) const;
  // The raw bytes a token stands for (what decode concatenates).
  std::string token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  int32_t vocab_size() const { return vocab_size_; }  // max id + 1
  const TokenizerConfig& config() const { return config_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  // Id of a special-token string from the config (e.g. config().eos_token), if it is a token.
  std::optional<int32_t> special_id(const std::string& content) const;

 private:
  struct Segment {
    std::string text;
    int32_t token = -1;  // >= 0: an added token, text unused
  };
  void split_added(const std::string& text, bool normalized_pass, std::vector<Segment>* out) const;
  void encode_text(const std::string& text, std::vector<int32_t>* out) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  bool byte_level_ = false;          // pre-tokenizer has ByteLevel: BPE reads bytes via the alphabet
  bool byte_level_decoder_ = false;  // decoder is ByteLevel
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  struct TrieNode {
    std::unordered_map<unsigned char, int> next;
    int token = -1;  // index into added_
  };
  std::vector<TrieNode> trie_[2];  // [0]: normalized=false tokens, [1]: normalized=true
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // post-processor with add_special_tokens
  TokenizerConfig config_;
  int32_t vocab_size_ = 0;
};

// Incremental decoding for streaming: push ids one at a time, get text that never contains a
// broken UTF-8 sequence (an incomplete tail waits for the next token; finish() flushes it lossily).
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}
  std::string push(int32_t id);
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace rlcpp
