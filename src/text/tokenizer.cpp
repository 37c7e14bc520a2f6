#include "text/tokenizer.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "text/bpe.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"
#include "util/error.h"
#include "util/file.h"

namespace rlcpp {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// A special-token field of tokenizer_config.json: a string or {"content": ...}.
std::string token_string(const Json& config, const char* key) {
  if (!config.contains(key)) return "";
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

// Post-processor → ids added before / after the sequence when add_special_tokens is set.
void parse_post_processor(const Json& json, const std::string& where, std::vector<int32_t>* prefix,
                          std::vector<int32_t>* suffix) {
  if (json.is_null()) return;
  const std::string type = json.value("type", "");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    for (const auto& p : json.at("processors")) parse_post_processor(p, where, prefix, suffix);
    return;
  }
  if (type == "TemplateProcessing") {
    const auto& specials = json.value("special_tokens", Json::object());
    bool seen_sequence = false;
    for (const auto& item : json.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string id = item["SpecialToken"].at("id").get<std::string>();
        if (!specials.contains(id)) throw_user_error("{}: post_processor special token \"{}\" is not defined", where, id);
        for (const auto& tid : specials[id].at("ids")) (seen_sequence ? suffix : prefix)->push_back(tid.get<int32_t>());
      }
    }
    return;
  }
  throw_user_error("{}: post_processor type \"{}\" is not supported (supported: TemplateProcessing, ByteLevel, "
                   "Sequence)", where, type);
}

// Decoder → whether it is byte-level. Anything but ByteLevel (or a Sequence of it) is unsupported.
bool parse_decoder(const Json& json, const std::string& where) {
  if (json.is_null()) return false;
  const std::string type = json.value("type", "");
  if (type == "ByteLevel") return true;
  if (type == "Sequence") {
    bool byte_level = false;
    for (const auto& d : json.at("decoders")) byte_level = parse_decoder(d, where) || byte_level;
    return byte_level;
  }
  throw_user_error("{}: decoder type \"{}\" is not supported (supported: ByteLevel)", where, type);
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::shared_ptr<Tokenizer> Tokenizer::from_dir(const fs::path& dir) {
  const fs::path path = dir / "tokenizer.json";
  if (!fs::exists(path)) {
    throw_user_error("'{}' has no tokenizer.json (rlcpp needs the fast-tokenizer file; tokenizer.model / vocab.json "
                     "alone are not supported)", dir.string());
  }
  const fs::path config_path = dir / "tokenizer_config.json";
  const std::string config = fs::exists(config_path) ? read_file(config_path, "tokenizer config") : "";
  return std::make_shared<Tokenizer>(read_file(path, "tokenizer"), config, path.string());
}

Tokenizer::Tokenizer(const std::string& tokenizer_json, const std::string& config_json, const std::string& where) try {
  Json json;
  try {
    json = Json::parse(tokenizer_json);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw_user_error("{}: not valid JSON: {}", where, e.what());
  }
  if (!json.is_object() || !json.contains("model")) throw_user_error("{}: no \"model\" in tokenizer.json", where);
  normalizer_ = Normalizer::from_json(json.value("normalizer", Json()), where);
  pre_tokenizer_ = PreTokenizer::from_json(json.value("pre_tokenizer", Json()), where);
  byte_level_ = pre_tokenizer_ && pre_tokenizer_->byte_level();
  model_ = std::make_unique<BpeModel>(json["model"], where + " model");
  byte_level_decoder_ = parse_decoder(json.value("decoder", Json()), where);
  vocab_size_ = model_->max_id() + 1;
  for (const auto& t : json.value("added_tokens", Json::array())) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      throw_user_error("{}: added token {} must be {{\"id\": integer, \"content\": string, ...}}", where,
                       t.dump().substr(0, 120));
    }
    const int64_t id = t["id"].get<int64_t>();
    const std::string content = t["content"].get<std::string>();
    if (id < 0 || id >= kMaxTokenId) {
      throw_user_error("{}: added token \"{}\" has id {}; ids are integers in [0, {})", where, content.substr(0, 80), id,
                       kMaxTokenId);
    }
    // An added token may repeat a vocabulary entry (special tokens often do), but not take another's id.
    if (id <= model_->max_id() && !model_->id_to_token(static_cast<int32_t>(id)).empty() &&
        model_->id_to_token(static_cast<int32_t>(id)) != content) {
      throw_user_error("{}: added token \"{}\" has id {}, which the vocabulary gives to \"{}\"", where,
                       content.substr(0, 80), id, model_->id_to_token(static_cast<int32_t>(id)).substr(0, 80));
    }
    if (auto other = added_by_id_.find(static_cast<int32_t>(id));
        other != added_by_id_.end() && added_[other->second].content != content) {
      throw_user_error("{}: added tokens \"{}\" and \"{}\" share id {}", where, added_[other->second].content.substr(0, 80),
                       content.substr(0, 80), id);
    }
    AddedToken token;
    token.id = static_cast<int32_t>(id);
    token.content = content;
    token.special = t.value("special", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.single_word = t.value("single_word", false);
    token.normalized = t.value("normalized", !token.special);
    if (token.content.empty()) continue;
    added_by_id_[token.id] = added_.size();
    added_by_content_[token.content] = token.id;
    vocab_size_ = std::max(vocab_size_, token.id + 1);
    added_.push_back(token);
  }
  for (auto& trie : trie_) trie.emplace_back();
  for (size_t i = 0; i < added_.size(); ++i) {
    auto& trie = trie_[added_[i].normalized && normalizer_ ? 1 : 0];
    int node = 0;
    for (unsigned char c : added_[i].content) {
      auto it = trie[node].next.find(c);
      if (it == trie[node].next.end()) {
        trie.emplace_back();
        it = trie[node].next.emplace(c, static_cast<int>(trie.size() - 1)).first;
      }
      node = it->second;
    }
    trie[node].token = static_cast<int>(i);
  }
  parse_post_processor(json.value("post_processor", Json()), where, &prefix_ids_, &suffix_ids_);

  if (!config_json.empty()) {
    Json config;
    try {
      config = Json::parse(config_json);
    } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
      throw_user_error("{}: tokenizer_config.json is not valid JSON: {}", where, e.what());
    }
    if (config.contains("chat_template")) {
      const auto& tpl = config["chat_template"];
      if (tpl.is_string()) {
        config_.chat_template = tpl.get<std::string>();
      } else if (tpl.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const auto& entry : tpl) {
          if (entry.value("name", "") == "default") config_.chat_template = entry.value("template", "");
        }
      }
    }
    config_.bos_token = token_string(config, "bos_token");
    config_.eos_token = token_string(config, "eos_token");
    config_.pad_token = token_string(config, "pad_token");
    config_.unk_token = token_string(config, "unk_token");
    config_.tokenizer_class = config.value("tokenizer_class", "");
    // transformers' LlamaTokenizerFast rebuilds the post-processor from add_bos_token/add_eos_token.
    if (config_.tokenizer_class.rfind("Llama", 0) == 0 &&
        (config.contains("add_bos_token") || config.contains("add_eos_token"))) {
      prefix_ids_.clear();
      suffix_ids_.clear();
      if (config.value("add_bos_token", true) && special_id(config_.bos_token)) {
        prefix_ids_.push_back(*special_id(config_.bos_token));
      }
      if (config.value("add_eos_token", false) && special_id(config_.eos_token)) {
        suffix_ids_.push_back(*special_id(config_.eos_token));
      }
    }
  }
} catch (const Json::exception& e) {  // a field of the wrong type, where the checks above do not look
  throw_user_error("{} (or tokenizer_config.json beside it): unexpected contents: {}", where, e.what());
}

std::optional<int32_t> Tokenizer::special_id(const std::string& content) const {
  if (content.empty()) return std::nullopt;
  return token_to_id(content);
}

std::optional<int32_t> Tokenizer::token_to_id(const std::string& token) const {
  auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return added_[it->second].content;
  return model_->id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && added_[it->second].special;
}

void Tokenizer::split_added(const std::string& text, bool normalized_pass, std::vector<Segment>* out) const {
  const auto& trie = trie_[normalized_pass ? 1 : 0];
  if (trie[0].next.empty()) {
    if (!text.empty()) out->push_back({text, -1});
    return;
  }
  size_t start_offset = 0;  // end of the last emitted piece
  size_t pos = 0;
  while (pos < text.size()) {
    // Longest added token starting at pos.
    int node = 0, best = -1;
    size_t best_end = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      auto it = trie[node].next.find(static_cast<unsigned char>(text[i]));
      if (it == trie[node].next.end()) break;
      node = it->second;
      if (trie[node].token >= 0) {
        best = trie[node].token;
        best_end = i + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = added_[best];
    size_t start = pos, stop = best_end;
    if (token.single_word) {
      bool word_before = false, word_after = false;
      if (start > 0) {
        size_t p = start - 1;
        while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xc0) == 0x80) --p;
        size_t q = p;
        word_before = is_word_char(utf8_next(text, &q));
      }
      if (stop < text.size()) {
        size_t q = stop;
        word_after = is_word_char(utf8_next(text, &q));
      }
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    if (token.lstrip) {
      size_t p = start;
      while (p > start_offset) {
        size_t back = p - 1;
        while (back > start_offset && (static_cast<unsigned char>(text[back]) & 0xc0) == 0x80) --back;
        size_t q = back;
        if (!is_unicode_whitespace(utf8_next(text, &q))) break;
        p = back;
      }
      start = p;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t q = stop;
        if (!is_unicode_whitespace(utf8_next(text, &q))) break;
        stop = q;
      }
    }
    if (start > start_offset) out->push_back({text.substr(start_offset, start - start_offset), -1});
    out->push_back({"", token.id});
    start_offset = stop;
    pos = stop;
  }
  if (start_offset < text.size()) out->push_back({text.substr(start_offset), -1});
}

void Tokenizer::encode_text(const std::string& text, std::vector<int32_t>* out) const {
  std::vector<std::string> pieces{text};
  if (pre_tokenizer_) pre_tokenizer_->split(&pieces);
  for (const auto& piece : pieces) model_->tokenize(piece, byte_level_, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  std::vector<Segment> raw;
  split_added(std::string(text), false, &raw);
  for (const auto& segment : raw) {
    if (segment.token >= 0) {
      ids.push_back(segment.token);
      continue;
    }
    const std::string normalized = normalizer_ ? normalizer_->normalize(segment.text) : segment.text;
    std::vector<Segment> parts;
    split_added(normalized, true, &parts);
    for (const auto& part : parts) {
      if (part.token >= 0) {
        ids.push_back(part.token);
      } else {
        encode_text(part.text, &ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const std::string token = id_to_token(id);
  if (!byte_level_decoder_) return token;
  // Byte-level decoder: every char maps back to a byte, else the token's own UTF-8 (added tokens).
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const int b = char_to_byte(utf8_next(token, &pos));
    if (b < 0) return token;
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return utf8_lossy(bytes);
}

std::string StreamDecoder::push(int32_t id) {
  if (!(skip_special_ && tokenizer_.is_special(id))) pending_ += tokenizer_.token_bytes(id);
  const size_t valid = utf8_valid_prefix(pending_);
  // An incomplete but possibly valid tail waits; anything else invalid is emitted as U+FFFD.
  size_t emit = valid;
  while (emit < pending_.size() && !utf8_incomplete_tail(pending_, emit)) {
    size_t next = emit;
    utf8_next(pending_, &next);
    emit = next;
    emit += utf8_valid_prefix(std::string_view(pending_).substr(emit));
  }
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, emit));
  pending_.erase(0, emit);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace rlcpp
