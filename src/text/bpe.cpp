#include "text/bpe.h"

#include <queue>

#include "text/unicode.h"
#include "util/error.h"

namespace rlcpp {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& json, const std::string& where) {
  const std::string type = json.value("type", "BPE");
  if (type != "BPE") {
    throw_user_error("{}: model type \"{}\" is not supported (rlcpp runs BPE tokenizers: GPT-2, Qwen, Llama 3, "
                     "DeepSeek; not Unigram, WordPiece or WordLevel)", where, type);
  }
  if (!json.contains("vocab") || !json["vocab"].is_object()) throw_user_error("{}: model has no \"vocab\" object", where);
  int32_t max_id = -1;
  for (auto it = json["vocab"].begin(); it != json["vocab"].end(); ++it) {
    const auto& value = it.value();
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxTokenId) {
      throw_user_error("{}: vocab token \"{}\" has id {}; ids are integers in [0, {})", where, it.key().substr(0, 80),
                       value.dump().substr(0, 40), kMaxTokenId);
    }
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    vocab_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  std::vector<bool> taken(id_to_token_.size(), false);
  for (const auto& [token, id] : vocab_) {
    if (taken[static_cast<size_t>(id)]) {
      throw_user_error("{}: vocab tokens \"{}\" and \"{}\" share id {}; every id names one token", where,
                       id_to_token_[static_cast<size_t>(id)].substr(0, 80), token.substr(0, 80), id);
    }
    taken[static_cast<size_t>(id)] = true;
    id_to_token_[static_cast<size_t>(id)] = token;
  }
  auto string_or = [&](const char* key) {
    return json.contains(key) && json[key].is_string() ? json[key].get<std::string>() : std::string();
  };
  prefix_ = string_or("continuing_subword_prefix");
  suffix_ = string_or("end_of_word_suffix");
  fuse_unk_ = json.value("fuse_unk", false);
  byte_fallback_ = json.value("byte_fallback", false);
  ignore_merges_ = json.value("ignore_merges", false);
  const std::string unk = string_or("unk_token");
  if (!unk.empty()) {
    auto found = vocab_.find(unk);
    if (found == vocab_.end()) throw_user_error("{}: unk_token \"{}\" is not in the vocabulary", where, unk);
    unk_id_ = found->second;
  }
  for (int b = 0; b < 256; ++b) {
    auto found = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_fallback_ids_[b] = found == vocab_.end() ? -1 : found->second;
  }
  const auto& merges = json.value("merges", nlohmann::json::array());
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const auto& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {  // "a b" (older files)
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ', 1);
      if (space == std::string::npos) throw_user_error("{}: merge {} is not \"left right\"", where, merge.dump());
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {  // ["a", "b"] (newer files)
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw_user_error("{}: merge {} is neither \"a b\" nor [\"a\", \"b\"]", where, merge.dump());
    }
    auto l = vocab_.find(left), r = vocab_.find(right);
    std::string merged = left + (prefix_.empty() || right.rfind(prefix_, 0) != 0 ? right : right.substr(prefix_.size()));
    auto m = vocab_.find(merged);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      throw_user_error("{}: merge #{} ({} + {}) uses a token that is not in the vocabulary", where, rank, left, right);
    }
    merges_.emplace(pair_key(l->second, r->second), Merge{rank, m->second});
    ++rank;
  }
}

std::optional<int32_t> BpeModel::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeModel::id_to_token(int32_t id) const {
  static const std::string empty;
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return empty;
  return id_to_token_[id];
}

void BpeModel::tokenize(std::string_view piece, bool byte_level, std::vector<int32_t>* out) const {
  std::string word = byte_level ? bytes_to_byte_level(piece) : std::string(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (auto whole = vocab_.find(word); ignore_merges_ && whole != vocab_.end()) {
    ids.push_back(whole->second);
  } else {
    merge_word(word, &ids);
  }
  out->insert(out->end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheCapacity) cache_.clear();
  cache_.emplace(std::move(word), std::move(ids));
}

void BpeModel::merge_word(const std::string& word, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  // Initial symbols: one per character, with prefix/suffix, byte fallback or unk for unknown ones.
  size_t pos = 0;
  bool previous_unk = false;
  while (pos < word.size()) {
    const size_t start = pos;
    utf8_next(word, &pos);
    std::string ch = word.substr(start, pos - start);
    if (start > 0 && !prefix_.empty()) ch = prefix_ + ch;
    if (pos == word.size() && !suffix_.empty()) ch += suffix_;
    auto found = vocab_.find(ch);
    if (found != vocab_.end()) {
      symbols.push_back({found->second, 0, 0, true});
      previous_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t i = start; i < pos; ++i) all = all && byte_fallback_ids_[static_cast<unsigned char>(word[i])] >= 0;
      if (all) {
        for (size_t i = start; i < pos; ++i) {
          symbols.push_back({byte_fallback_ids_[static_cast<unsigned char>(word[i])], 0, 0, true});
        }
        previous_unk = false;
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (!(fuse_unk_ && previous_unk)) symbols.push_back({unk_id_, 0, 0, true});
      previous_unk = true;
    }
  }
  const int n = static_cast<int>(symbols.size());
  for (int i = 0; i < n; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int left) {
    if (left < 0) return;  // the first symbol has no left neighbour
    const int right = symbols[left].next;
    if (right < 0) return;
    auto m = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (m != merges_.end()) queue.push({m->second.rank, left, m->second.merged});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto m = merges_.find(pair_key(left.id, right.id));
    if (m == merges_.end() || m->second.merged != top.merged) continue;  // stale candidate
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int i = 0; i < n; ++i) {
    if (symbols[i].alive) out->push_back(symbols[i].id);
  }
}

}  // namespace rlcpp
