// Tokenizer components on small hand-made tokenizer.json files: BPE merge order, ignore_merges,
// byte fallback, added-token flags, split behaviours, errors for unsupported parts, streaming decode.
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "text/chat_example.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "util/error.h"

using namespace rlcpp;
using Json = nlohmann::json;

namespace {

// A byte-level BPE over "a", "b", "c", " " with merges a+b → ab (rank 0), ab+c → abc (rank 1),
// b+c → bc (rank 2), Ġ+a → Ġa (rank 3).
Json tiny_tokenizer() {
  Json vocab = Json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(byte_to_char()[b], &s);
    vocab[s] = id++;
  }
  for (const char* t : {"ab", "abc", "bc", "Ġa"}) vocab[t] = id++;
  return {{"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens", Json::array()},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "ab c", "b c", "Ġ a"}}}}};
}

std::vector<int32_t> ids_of(const Tokenizer& t, const std::vector<std::string>& pieces) {
  std::vector<int32_t> ids;
  for (const auto& p : pieces) ids.push_back(*t.token_to_id(p));
  return ids;
}

Json added(int id, const std::string& content, bool special, Json flags = Json::object()) {
  Json t = {{"id", id}, {"content", content}, {"special", special}, {"lstrip", false}, {"rstrip", false},
            {"single_word", false}, {"normalized", false}};
  for (auto it = flags.begin(); it != flags.end(); ++it) t[it.key()] = it.value();
  return t;
}

}  // namespace

TEST(Bpe, LowestRankFirstLeftmostOnTies) {
  Tokenizer t(tiny_tokenizer().dump(), "", "tiny");
  EXPECT_EQ(t.encode("abc"), ids_of(t, {"abc"}));             // a+b (0) then ab+c (1), not b+c (2)
  EXPECT_EQ(t.encode("bc"), ids_of(t, {"bc"}));
  EXPECT_EQ(t.encode("abab"), ids_of(t, {"ab", "ab"}));
  EXPECT_EQ(t.encode("cab"), ids_of(t, {"c", "ab"}));
  EXPECT_EQ(t.encode("a abc"), ids_of(t, {"a", "Ġ", "abc"}));  // a+b (0) before Ġ+a (3): Ġa never forms
  EXPECT_EQ(t.encode(" ac"), ids_of(t, {"Ġa", "c"}));
  EXPECT_EQ(t.decode(t.encode("a abc cab")), "a abc cab");
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  Json j = tiny_tokenizer();
  j["model"]["vocab"]["bca"] = 300;
  j["model"]["merges"].push_back("bc a");
  Tokenizer plain(j.dump(), "", "tiny");
  EXPECT_EQ(plain.encode("bca"), ids_of(plain, {"bca"}));
  j["model"]["vocab"]["cab"] = 301;
  Tokenizer without(j.dump(), "", "tiny");
  EXPECT_EQ(without.encode("cab"), ids_of(without, {"c", "ab"}));  // no merge reaches "cab"
  j["model"]["ignore_merges"] = true;
  Tokenizer with(j.dump(), "", "tiny");
  EXPECT_EQ(with.encode("cab"), ids_of(with, {"cab"}));
}

TEST(Bpe, ByteFallbackAndUnknown) {
  Json j = {{"pre_tokenizer", nullptr}, {"decoder", nullptr}, {"added_tokens", Json::array()},
            {"model", {{"type", "BPE"}, {"vocab", {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}}},
                       {"merges", Json::array()}, {"byte_fallback", true}, {"unk_token", "<unk>"}}}};
  Tokenizer t(j.dump(), "", "fallback");
  EXPECT_EQ(t.encode("aé"), (std::vector<int32_t>{1, 2, 3}));  // é = C3 A9
  EXPECT_EQ(t.encode("a😀"), (std::vector<int32_t>{1, 0}));    // bytes not all in vocab → unk
  j["model"]["byte_fallback"] = false;
  j["model"]["fuse_unk"] = true;
  Tokenizer fused(j.dump(), "", "fuse");
  EXPECT_EQ(fused.encode("éé"), (std::vector<int32_t>{0}));
}

TEST(AddedTokens, MatchedBeforePreTokenisationWithFlags) {
  Json j = tiny_tokenizer();
  j["added_tokens"] = {added(400, "<s>", true), added(401, "<x>", false, {{"lstrip", true}, {"rstrip", true}}),
                       added(402, "cab", false, {{"single_word", true}}), added(403, "<s>ab", true)};
  Tokenizer t(j.dump(), "", "added");
  EXPECT_EQ(t.encode("a<s>b"), (std::vector<int32_t>{*t.token_to_id("a"), 400, *t.token_to_id("b")}));
  EXPECT_EQ(t.encode("<s>abc"), (std::vector<int32_t>{403, *t.token_to_id("c")}));  // longest match
  EXPECT_EQ(t.encode("a  <x>  b"), (std::vector<int32_t>{*t.token_to_id("a"), 401, *t.token_to_id("b")}));
  EXPECT_EQ(t.encode("cab"), (std::vector<int32_t>{402}));
  EXPECT_EQ(t.encode("acab"), ids_of(t, {"a", "c", "ab"}));  // single_word: not inside a word
  EXPECT_EQ(t.decode(t.encode("a<s>b"), true), "ab");          // skip_special_tokens
  EXPECT_EQ(t.decode(t.encode("a<s>b"), false), "a<s>b");
  EXPECT_TRUE(t.is_special(400));
  EXPECT_FALSE(t.is_special(401));
}

TEST(PreTokenizer, SplitBehaviours) {
  // Split on "-" with each behaviour; then byte-level without its own regex.
  auto pieces_for = [](const std::string& behavior, bool invert) {
    Json j = tiny_tokenizer();
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    Tokenizer t(j.dump(), "", "split");
    std::vector<std::string> out;
    for (int32_t id : t.encode("a-b--c-")) out.push_back(t.id_to_token(id));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces_for("Removed", false), (V{"a", "b", "c"}));
  EXPECT_EQ(pieces_for("Isolated", false), (V{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(pieces_for("MergedWithPrevious", false), (V{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(pieces_for("Contiguous", false), (V{"a", "-", "b", "-", "-", "c", "-"}));
  // Token ids are per piece, so compare piece boundaries through the texts instead: "b-" vs "b", "-".
  Json j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "MergedWithNext"}};
  j["model"]["vocab"]["-b"] = 310;
  j["model"]["merges"].push_back("- b");
  Tokenizer next(j.dump(), "", "next");
  EXPECT_EQ(next.encode("a-b"), (std::vector<int32_t>{*next.token_to_id("a"), 310}));
  j["pre_tokenizer"]["behavior"] = "MergedWithPrevious";
  Tokenizer prev(j.dump(), "", "prev");
  EXPECT_EQ(prev.encode("a-b"), ids_of(prev, {"a", "-", "b"}));  // "a-" then "b": no "-b" merge possible
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  Json j = tiny_tokenizer();
  j["model"]["type"] = "Unigram";
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "t.json", "Unigram");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "pre_tokenizer type \"Metaspace\"");
  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "normalizer type \"BertNormalizer\"");
  j = tiny_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "decoder type \"WordPiece\"");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "does not compile");
  EXPECT_THROW_MSG(Tokenizer("{not json", "", "t.json"), UserError, "t.json", "not valid JSON");
  rlcpp::testing::TempDir dir;
  EXPECT_THROW_MSG(Tokenizer::from_dir(dir.path()), UserError, "no tokenizer.json");
}

// Ids out of range, shared, or an added token taking another token's id: errors naming the file
// and the token (a negative id once crashed every command that loaded the tokenizer).
TEST(TokenizerErrors, BadIdsAreNamed) {
  Json j = tiny_tokenizer();
  j["model"]["vocab"]["ab"] = -3;
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "t.json", "vocab token \"ab\" has id -3", "[0, 16777216)");
  j = tiny_tokenizer();
  j["model"]["vocab"]["ab"] = 2000000000;
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "vocab token \"ab\" has id 2000000000");
  j = tiny_tokenizer();
  j["model"]["vocab"]["ab"] = "7";
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "vocab token \"ab\" has id \"7\"");
  j = tiny_tokenizer();
  j["model"]["vocab"]["ab"] = j["model"]["vocab"]["bc"];
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "share id");
  j = tiny_tokenizer();
  j["added_tokens"] = Json::array({added(-1, "<x>", true)});
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "added token \"<x>\" has id -1");
  j = tiny_tokenizer();
  j["added_tokens"] = Json::array({added(j["model"]["vocab"]["ab"].get<int>(), "<x>", true)});
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "added token \"<x>\"", "the vocabulary gives to \"ab\"");
  j = tiny_tokenizer();
  j["added_tokens"] = Json::array({added(300, "<x>", true), added(300, "<y>", true)});
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "added tokens \"<x>\" and \"<y>\" share id 300");
  j = tiny_tokenizer();
  j["added_tokens"] = Json::array({Json{{"id", "300"}, {"content", "<x>"}}});
  EXPECT_THROW_MSG(Tokenizer(j.dump(), "", "t.json"), UserError, "added token", "must be");
  j = tiny_tokenizer();  // an added token repeating its own vocabulary entry is fine
  j["added_tokens"] = Json::array({added(j["model"]["vocab"]["ab"].get<int>(), "ab", true)});
  EXPECT_NO_THROW(Tokenizer(j.dump(), "", "t.json"));
}

TEST(StreamDecoder, NeverEmitsBrokenUtf8) {
  Tokenizer t(tiny_tokenizer().dump(), "", "tiny");
  const std::string text = "a 你好 😀 é b";
  const auto ids = t.encode(text);  // byte-level: multi-byte chars span several tokens
  ASSERT_GT(ids.size(), 12u);
  StreamDecoder stream(t, false);
  std::string joined;
  for (int32_t id : ids) {
    const std::string delta = stream.push(id);
    EXPECT_EQ(utf8_valid_prefix(delta), delta.size()) << "broken UTF-8 emitted";
    joined += delta;
  }
  joined += stream.finish();
  EXPECT_EQ(joined, text);
  // A stream cut inside a character flushes as U+FFFD at the end, never as raw bytes.
  StreamDecoder cut(t, false);
  std::string partial;
  for (int32_t id : t.encode("😀")) {
    if (partial.empty() && id == t.encode("😀").back()) break;
    partial += cut.push(id);
  }
  partial += cut.finish();
  EXPECT_EQ(partial, "\xEF\xBF\xBD");
}

TEST(Utf8, LossyReplacesEachMaximalInvalidSubpartOnce) {
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");               // truncated 4-byte character
  EXPECT_EQ(utf8_lossy("a\xFF" "b"), "a\xEF\xBF\xBD" "b");             // invalid byte
  EXPECT_EQ(utf8_lossy("\xE0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: each byte
  EXPECT_EQ(utf8_lossy("ok \xE4\xBD\xA0"), "ok \xE4\xBD\xA0");          // valid stays
}

TEST(ChatExample, LearnsExactlyTheAssistantTurns) {
  const auto dir = std::filesystem::path(RLCPP_SOURCE_DIR) / "models" / "arith-tiny";
  auto tokenizer = rlcpp::Tokenizer::from_dir(dir);
  rlcpp::ChatTemplate chat_template(*tokenizer);
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "What is 1 + 2?"}, {"role": "assistant", "content": "\\boxed{3}"},
          {"role": "user", "content": "And 2 + 2?"}, {"role": "assistant", "content": "\\boxed{4}"}])");
  const auto example = rlcpp::build_chat_example(*tokenizer, chat_template, messages, "Be brief.", "test");
  ASSERT_EQ(example.ids.size(), example.loss_mask.size());
  // The whole conversation (with the system prompt) tokenises to the same ids, and the learned
  // tokens decode to the two assistant turns with their end-of-turn tokens.
  auto all = messages;
  all.insert(all.begin(), nlohmann::ordered_json{{"role", "system"}, {"content", "Be brief."}});
  EXPECT_EQ(example.ids, tokenizer->encode(chat_template.render(all, false)));
  std::vector<int32_t> learned;
  for (size_t k = 0; k < example.ids.size(); ++k) {
    if (example.loss_mask[k]) learned.push_back(example.ids[k]);
  }
  EXPECT_EQ(tokenizer->decode(learned, false), "\\boxed{3}<|im_end|>\n\\boxed{4}<|im_end|>\n");
  EXPECT_EQ(example.n_learned, static_cast<int64_t>(learned.size()));
  nlohmann::ordered_json no_answer = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_THROW(rlcpp::build_chat_example(*tokenizer, chat_template, no_answer, "", "x.jsonl:3"), rlcpp::UserError);
}
