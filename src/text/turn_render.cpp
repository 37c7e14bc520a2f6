#include "text/turn_render.h"

#include "util/error.h"

namespace rlcpp {

const EnumTable<TitoKind>& tito_kinds() {
  static const EnumTable<TitoKind> table(
      "token-exactness outcome",
      {{TitoKind::kExact, "exact", "the template's rendering of the conversation encodes to the sequence"},
       {TitoKind::kNoncanonical, "noncanonical", "the same text; the model sampled a non-canonical split into tokens"},
       {TitoKind::kRerender, "rerender", "the template renders earlier turns differently once more follow (by design)"},
       {TitoKind::kMismatch, "mismatch", "drift: the sequence differs from the template's rendering"}});
  return table;
}

namespace {

// The dummy assistant content the delta is cut after: text no real conversation holds.
const char* const kTurnMarker = "\x1frlcpp-assistant-turn-marker\x1f";

size_t first_difference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t k = 0;
  while (k < n && a[k] == b[k]) ++k;
  return k;
}

}  // namespace

TurnRenderer::TurnRenderer(const Tokenizer& tokenizer, const ChatTemplate& chat, nlohmann::ordered_json variables)
    : tokenizer_(tokenizer), chat_(chat), variables_(std::move(variables)) {
  if (!variables_.is_object()) variables_ = nlohmann::ordered_json::object();
}

std::string TurnRenderer::render(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  return chat_.render(messages, add_generation_prompt, variables_);
}

RenderedDelta TurnRenderer::delta(const nlohmann::ordered_json& messages, int32_t stop) const {
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  conversation.push_back({{"role", "user"}, {"content", "rlcpp"}});
  conversation.push_back({{"role", "assistant"}, {"content", kTurnMarker}});
  for (const auto& m : messages) conversation.push_back(m);
  const std::string text = render(conversation, true);
  const size_t at = text.rfind(kTurnMarker);
  RLCPP_CHECK(at != std::string::npos, "the chat template dropped an assistant turn's content");
  size_t cut = at + std::string(kTurnMarker).size();
  const std::string stop_text = tokenizer_.decode({stop});
  if (!stop_text.empty() && text.compare(cut, stop_text.size(), stop_text) == 0) {
    cut += stop_text.size();
  } else {
    // The template ends assistant turns with another special token than the one the model
    // stopped with (Llama 3.1: <|eom_id|> sampled, <|eot_id|> rendered): that one is not repeated.
    const auto after = tokenizer_.encode(std::string_view(text).substr(cut));
    if (!after.empty() && tokenizer_.is_special(after[0])) cut += tokenizer_.decode({after[0]}).size();
  }
  RenderedDelta out;
  out.text = text.substr(cut);
  out.ids = tokenizer_.encode(out.text);
  return out;
}

bool TurnRenderer::prefix_stable(const nlohmann::ordered_json& conversation) const {
  std::string previous;
  for (size_t k = 1; k <= conversation.size(); ++k) {
    nlohmann::ordered_json head = nlohmann::ordered_json::array();
    for (size_t j = 0; j < k; ++j) head.push_back(conversation[j]);
    std::string text;
    try {
      text = render(head, false);
    } catch (const UserError&) {
      continue;  // a prefix the template refuses (it wants a user turn first, ...): nothing to compare
    }
    if (text.compare(0, previous.size(), previous) != 0) return false;
    previous = std::move(text);
  }
  return true;
}

std::string TurnRenderer::describe(const std::vector<int32_t>& ids, size_t at) const {
  const size_t begin = at >= 3 ? at - 3 : 0, end = std::min(ids.size(), at + 6);
  std::string run;
  for (size_t k = begin; k < end; ++k) run += fmt::format("{}{}", k == begin ? "" : " ", ids[k]);
  const std::vector<int32_t> slice(ids.begin() + static_cast<std::ptrdiff_t>(begin), ids.begin() + static_cast<std::ptrdiff_t>(end));
  return fmt::format("[{}] {}", run, nlohmann::json(tokenizer_.decode(slice)).dump());
}

TitoCheck TurnRenderer::check(const nlohmann::ordered_json& conversation, const std::string& expected,
                              const std::vector<int32_t>& ids, const std::vector<uint8_t>& sampled) const {
  RLCPP_CHECK(sampled.size() == ids.size(), "tito check: {} flags for {} ids", sampled.size(), ids.size());
  TitoCheck out;
  // Where in `ids` a character offset of their text falls.
  auto token_at = [&](size_t offset) {
    size_t bytes = 0;
    for (size_t k = 0; k < ids.size(); ++k) {
      bytes += tokenizer_.token_bytes(ids[k]).size();
      if (bytes > offset) return k;
    }
    return ids.size();
  };
  const std::string sequence_text = tokenizer_.decode(ids);
  if (sequence_text != expected) {  // the sequence is not the text it was built from
    const size_t p = first_difference(sequence_text, expected);
    out.kind = TitoKind::kMismatch;
    out.detail = fmt::format("the sequence's text differs from the text it was built from at character {}: {} vs {}", p,
                             nlohmann::json(sequence_text.substr(p, 40)).dump(), nlohmann::json(expected.substr(p, 40)).dump());
    return out;
  }
  const std::string whole = render(conversation, false);
  if (whole.compare(0, expected.size(), expected) != 0) {
    const size_t p = first_difference(whole, expected);
    const size_t t = token_at(p);
    const auto template_ids = tokenizer_.encode(whole);
    out.kind = prefix_stable(conversation) ? TitoKind::kMismatch : TitoKind::kRerender;
    out.detail = fmt::format("at character {} (token {}): the sequence has {}, the template renders {}", p, t,
                             describe(ids, t), describe(template_ids, std::min(t, template_ids.size())));
    return out;
  }
  const auto template_ids = tokenizer_.encode(whole);
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k < template_ids.size() && template_ids[k] == ids[k]) continue;
    // The last token of a trajectory cut at its length limit may be the start of a longer token.
    if (k + 1 == ids.size() && sampled[k] != 0) break;
    out.kind = sampled[k] != 0 ? TitoKind::kNoncanonical : TitoKind::kMismatch;
    out.detail = fmt::format("token {} ({}): the sequence has {}, the template's text encodes to {}", k,
                             sampled[k] != 0 ? "sampled" : "inserted", describe(ids, k), describe(template_ids, k));
    return out;
  }
  return out;
}

}  // namespace rlcpp
