#include "openai/protocol.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "text/prompt_builder.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace rlcpp {

using Json = nlohmann::ordered_json;

ApiError::ApiError(int status_, std::string message_, std::string param_, std::string code_)
    : status(status_), message(std::move(message_)), param(std::move(param_)), code(std::move(code_)) {
  if (status == 401) type = "authentication_error";
  if (status >= 500) type = "server_error";
}

std::string ApiError::body() const {
  Json error = {{"message", message}, {"type", type}, {"param", param.empty() ? Json(nullptr) : Json(param)},
                {"code", code.empty() ? Json(nullptr) : Json(code)}};
  return Json({{"error", error}}).dump(-1, ' ', false, Json::error_handler_t::replace);
}

namespace {

const char* type_name(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

ApiError bad(const std::string& param, const std::string& what) { return ApiError(400, param + ": " + what, param); }

// A field's value, or nullopt when absent or null.
const nlohmann::json* field(const nlohmann::json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const nlohmann::json& body, const char* name, double fallback, double low, double high, bool open_low) {
  const auto* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number()) throw bad(name, fmt::format("expected a number, got {}", type_name(*v)));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < low || x > high || (open_low && x == low)) {
    throw bad(name, fmt::format("{} is out of range ({}{}, {}])", x, open_low ? "(" : "[", low, high));
  }
  return x;
}

int64_t integer(const nlohmann::json& body, const char* name, int64_t fallback, int64_t low, int64_t high) {
  const auto* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer() && !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>())) {
    throw bad(name, fmt::format("expected an integer, got {}", type_name(*v)));
  }
  const double x = v->get<double>();
  if (x < static_cast<double>(low) || x > static_cast<double>(high)) {
    throw bad(name, fmt::format("{} is out of range [{}, {}]", v->dump(), low, high));
  }
  return v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(x);
}

bool boolean(const nlohmann::json& body, const char* name, bool fallback) {
  const auto* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw bad(name, fmt::format("expected true or false, got {}", type_name(*v)));
  return v->get<bool>();
}

std::vector<int32_t> token_ids(const nlohmann::json& list, const std::string& param, int64_t vocab) {
  std::vector<int32_t> out;
  for (const auto& t : list) {
    if (!t.is_number_integer()) throw bad(param, fmt::format("token ids must be integers, got {}", type_name(t)));
    const int64_t id = t.get<int64_t>();
    if (id < 0 || (vocab > 0 && id >= vocab)) {
      throw bad(param, fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab));
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return out;
}

// Whether an object's "type" is "text" (absent: whether `absent` is): a "type" of another JSON type
// is not (nlohmann's value() would throw a type_error, answered 500).
bool text_type(const nlohmann::json& object, const char* absent) {
  const auto it = object.find("type");
  if (it == object.end()) return std::string(absent) == "text";
  return it->is_string() && it->get<std::string>() == "text";
}

// Features of the API that rlcpp does not implement, refused unless at their neutral value.
void refuse_unsupported(const nlohmann::json& body) {
  for (const char* name : {"frequency_penalty", "presence_penalty"}) {
    if (number(body, name, 0, -2, 2, false) != 0) throw bad(name, "penalties are not supported; leave it at 0");
  }
  if (number(body, "repetition_penalty", 1, 0, 1e9, true) != 1) {
    throw bad("repetition_penalty", "penalties are not supported; leave it at 1");
  }
  if (const auto* v = field(body, "logit_bias"); v != nullptr && !(v->is_object() && v->empty())) {
    throw bad("logit_bias", "logit biases are not supported");
  }
  if (const auto* v = field(body, "suffix"); v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
    throw bad("suffix", "suffixes are not supported");
  }
  if (boolean(body, "echo", false)) throw bad("echo", "echoing the prompt is not supported");
  if (const auto* v = field(body, "response_format"); v != nullptr && !(v->is_object() && text_type(*v, "text"))) {
    throw bad("response_format", "only text responses are supported");
  }
}

// A chat message's content as text: a string, or text parts [{"type": "text", "text": ...}].
std::string message_text(const nlohmann::json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) throw bad(param, fmt::format("expected a string or an array of text parts, got {}", type_name(content)));
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || !text_type(part, "") || !part.contains("text") || !part["text"].is_string()) {
      throw bad(param, "only text parts ({\"type\": \"text\", \"text\": ...}) are supported");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// A chat's tools: function schemas [{"type": "function", "function": {"name": ..., ...}}], in the
// order and key order the client wrote them (`text` parsed again keeping it: the template prints
// them with tojson). Null when there are none.
Json chat_tools(const nlohmann::json& body, const std::string& text) {
  const auto* t = field(body, "tools");
  if (t == nullptr || (t->is_array() && t->empty())) return nullptr;
  if (!t->is_array()) throw bad("tools", fmt::format("expected an array of tools, got {}", type_name(*t)));
  for (size_t k = 0; k < t->size(); ++k) {
    const auto& tool = (*t)[k];
    const bool function = tool.is_object() && tool.value("type", std::string("function")) == "function" &&
                          tool.contains("function") && tool["function"].is_object() &&
                          tool["function"].contains("name") && tool["function"]["name"].is_string();
    if (!function) throw bad(fmt::format("tools[{}]", k), "expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  return Json::parse(text)["tools"];
}

// An assistant turn's tool_calls as templates read them: each {"type": "function", "function":
// {"name", "arguments"}} with the arguments an object (the API sends them as a JSON string).
Json template_tool_calls(const nlohmann::json& calls, const std::string& at) {
  if (!calls.is_array()) throw bad(at, fmt::format("expected an array of tool calls, got {}", type_name(calls)));
  Json out = Json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const auto& call = calls[k];
    const std::string here = fmt::format("{}[{}]", at, k);
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
        !call["function"].contains("name") || !call["function"]["name"].is_string()) {
      throw bad(here, "expected {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    }
    Json arguments = Json::object();
    if (const auto it = call["function"].find("arguments"); it != call["function"].end() && !it->is_null()) {
      if (it->is_string()) {
        arguments = Json::parse(it->get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (!arguments.is_object()) throw bad(here + ".function.arguments", "expected a JSON object in a string");
      } else if (it->is_object()) {
        arguments = Json::parse(it->dump());
      } else {
        throw bad(here + ".function.arguments", fmt::format("expected a JSON object in a string, got {}", type_name(*it)));
      }
    }
    Json entry = {{"type", "function"}, {"function", {{"name", call["function"]["name"]}, {"arguments", arguments}}}};
    if (call.contains("id") && call["id"].is_string()) entry["id"] = call["id"];
    out.push_back(entry);
  }
  return out;
}

}  // namespace

ApiRequest parse_api_request(ApiEndpoint endpoint, const std::string& text, const ApiLimits& limits,
                             const Tokenizer& tokenizer, PromptBuilder& prompts) {
  const nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw ApiError(400, fmt::format("the request body must be a JSON object, got {}", type_name(body)));
  ApiRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == ApiEndpoint::kChat;
  // The model: a served name (the base model or a loaded adapter).
  if (const auto* v = field(body, "model")) {
    if (!v->is_string()) throw bad("model", fmt::format("expected a string, got {}", type_name(*v)));
    r.model = v->get<std::string>();
  } else {
    r.model = limits.models.empty() ? "" : limits.models.front();
  }
  if (std::find(limits.models.begin(), limits.models.end(), r.model) == limits.models.end()) {
    throw ApiError(404, fmt::format("The model `{}` does not exist (served: {})", r.model, fmt::join(limits.models, ", ")),
                   "model", "model_not_found");
  }
  refuse_unsupported(body);
  // Prompts: completions take text or token ids, one or a batch; chats take messages.
  if (!chat) {
    if (const auto* v = field(body, "tools"); v != nullptr && !(v->is_array() && v->empty())) {
      throw bad("tools", "tools are offered in chats (/v1/chat/completions)");
    }
    const auto* p = field(body, "prompt");
    if (p == nullptr) throw bad("prompt", "required");
    auto one = [&](const nlohmann::json& item) {
      if (item.is_string()) return tokenizer.encode(item.get<std::string>(), true);
      if (item.is_array()) return token_ids(item, "prompt", limits.vocab_size);
      throw bad("prompt", fmt::format("expected a string or token ids, got {}", type_name(item)));
    };
    if (p->is_string() || (p->is_array() && !p->empty() && (*p)[0].is_number())) {
      r.prompts.push_back(one(*p));
    } else if (p->is_array() && !p->empty()) {
      for (const auto& item : *p) r.prompts.push_back(one(item));
    } else {
      throw bad("prompt", "expected a string, an array of strings, token ids or arrays of token ids");
    }
  } else {
    r.tools = chat_tools(body, text);
    std::string choice = "auto";
    if (const auto* c = field(body, "tool_choice")) {
      if (!c->is_string() || (c->get<std::string>() != "auto" && c->get<std::string>() != "none")) {
        throw bad("tool_choice", "only \"auto\" and \"none\" are supported (a required or named tool is not)");
      }
      choice = c->get<std::string>();
    }
    r.tool_calls = !r.tools.is_null() && choice == "auto";
    r.tool_format = limits.tool_format;
    const auto* m = field(body, "messages");
    if (m == nullptr || !m->is_array() || m->empty()) throw bad("messages", "required: a non-empty array of messages");
    Json messages = Json::array();
    for (size_t k = 0; k < m->size(); ++k) {
      const auto& msg = (*m)[k];
      const std::string at = fmt::format("messages[{}]", k);
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string()) throw bad(at, "expected {\"role\", \"content\"}");
      const std::string role = msg["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool") {
        throw bad(at + ".role", fmt::format("\"{}\": expected system, user, assistant or tool", role));
      }
      Json message = {{"role", role == "developer" ? "system" : role},
                      {"content", message_text(msg.contains("content") ? msg["content"] : nlohmann::json(), at + ".content")}};
      if (role == "assistant" && msg.contains("tool_calls") && !msg["tool_calls"].is_null()) {
        message["tool_calls"] = template_tool_calls(msg["tool_calls"], at + ".tool_calls");
      }
      if (role == "tool" && msg.contains("tool_call_id") && msg["tool_call_id"].is_string()) {
        message["tool_call_id"] = msg["tool_call_id"];
      }
      messages.push_back(message);
    }
    std::optional<BuiltPrompt> built;
    try {  // a template may refuse a conversation (raise_exception): the client's to fix
      built = prompts.build(messages, 0, r.tools.is_null() ? Json::object() : Json({{"tools", r.tools}}));
    } catch (const UserError& e) {
      throw bad("messages", e.what());
    }
    if (!built) throw ApiError(413, "the chat does not fit the model's positions", "messages");
    r.prompts.push_back(built->ids);
  }
  for (const auto& ids : r.prompts) {
    if (ids.empty()) throw bad(chat ? "messages" : "prompt", "a prompt of no tokens");
  }
  // Sampling.
  r.n = integer(body, "n", 1, 1, limits.max_n);
  if (const auto* best = field(body, "best_of"); best != nullptr && integer(body, "best_of", r.n, 1, limits.max_n) != r.n) {
    throw bad("best_of", "best_of other than n is not supported");
  }
  SamplingParams& p = r.params;
  p.temperature = number(body, "temperature", 1.0, 0, 100, false);
  p.top_p = number(body, "top_p", 1.0, 0, 1, true);
  const int64_t top_k = integer(body, "top_k", 0, -1, std::numeric_limits<int32_t>::max());
  p.top_k = top_k < 0 ? 0 : top_k;  // vLLM's -1 (and 0): off
  p.min_p = number(body, "min_p", 0.0, 0, 1, false);
  if (p.min_p >= 1) throw bad("min_p", "must be below 1");
  if (const auto* s = field(body, "seed")) {
    if (!s->is_number_integer()) throw bad("seed", fmt::format("expected an integer, got {}", type_name(*s)));
    r.seed = s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
    r.seeded = true;
  }
  if (const auto* s = field(body, "stop")) {
    if (s->is_string()) {
      p.stop_strings.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (const auto& x : *s) {
        if (!x.is_string()) throw bad("stop", "expected a string or an array of strings");
        p.stop_strings.push_back(x.get<std::string>());
      }
    } else {
      throw bad("stop", fmt::format("expected a string or an array of strings, got {}", type_name(*s)));
    }
  }
  // The model's end-of-turn tokens stop every sample unless "ignore_eos" (vLLM's: fixed lengths).
  if (!boolean(body, "ignore_eos", false)) p.stop_token_ids = limits.stop_token_ids;
  if (const auto* s = field(body, "stop_token_ids")) {
    if (!s->is_array()) throw bad("stop_token_ids", "expected an array of token ids");
    for (int32_t id : token_ids(*s, "stop_token_ids", limits.vocab_size)) p.stop_token_ids.push_back(id);
  }
  // Log-probs: completions' "logprobs": k (the chosen token's and k alternatives); chat's
  // "logprobs": true with "top_logprobs": k.
  if (!chat) {
    if (field(body, "logprobs") != nullptr) {
      r.logprobs = true;
      p.logprobs = integer(body, "logprobs", 0, 0, limits.max_logprobs);
    }
  } else {
    r.logprobs = boolean(body, "logprobs", false);
    p.logprobs = integer(body, "top_logprobs", 0, 0, limits.max_logprobs);
    if (p.logprobs > 0 && !r.logprobs) throw bad("top_logprobs", "needs \"logprobs\": true");
  }
  r.stream = boolean(body, "stream", false);
  if (const auto* o = field(body, "stream_options")) {
    if (!o->is_object()) throw bad("stream_options", "expected an object");
    if (!r.stream) throw bad("stream_options", "only with \"stream\": true");
    r.include_usage = boolean(*o, "include_usage", false);
  }
  r.return_token_ids = boolean(body, "return_token_ids", false);
  // Lengths: each prompt within the limit (413), prompt + max_tokens within the positions (400).
  size_t longest = 0;
  for (const auto& ids : r.prompts) longest = std::max(longest, ids.size());
  const auto prompt_tokens = static_cast<int64_t>(longest);
  const int64_t positions = limits.max_positions;
  const int64_t prompt_limit = limits.max_prompt_tokens > 0 ? limits.max_prompt_tokens : positions - 1;
  if (prompt_limit > 0 && prompt_tokens > prompt_limit) {
    throw ApiError(413, fmt::format("the prompt has {} tokens, more than this server's {} (--max-prompt-tokens, or the "
                                    "model's {} positions less one)", prompt_tokens, prompt_limit, positions),
                   chat ? "messages" : "prompt", "context_length_exceeded");
  }
  const char* max_name = chat && field(body, "max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  const int64_t room = positions > 0 ? positions - prompt_tokens : std::numeric_limits<int32_t>::max();
  const int64_t fallback = chat ? std::min<int64_t>(room, std::max<int64_t>(limits.default_max_tokens, 1)) : limits.default_max_tokens;
  p.max_new_tokens = integer(body, max_name, std::max<int64_t>(1, std::min(fallback, room)), 1, std::numeric_limits<int32_t>::max());
  if (positions > 0 && prompt_tokens + p.max_new_tokens > positions) {
    throw bad(max_name, fmt::format("{} tokens of prompt + {} = {} exceed the model's {} positions; lower {}", prompt_tokens,
                                    p.max_new_tokens, prompt_tokens + p.max_new_tokens, positions, max_name));
  }
  // What the request can hold of the KV cache at once: every sample's sequence at its longest.
  int64_t request_tokens = 0;
  for (const auto& ids : r.prompts) request_tokens += r.n * (static_cast<int64_t>(ids.size()) + p.max_new_tokens);
  if (limits.max_request_tokens > 0 && request_tokens > limits.max_request_tokens) {
    throw ApiError(413, fmt::format("the request asks for up to {} tokens (n {} x (prompt + {} {}) over {} prompt(s)), more than "
                                    "this server's {} (--max-request-tokens); lower n or {}", request_tokens, r.n, max_name,
                                    p.max_new_tokens, r.prompts.size(), limits.max_request_tokens, max_name),
                   max_name);
  }
  return r;
}

namespace {

const char* finish_text(FinishReason r) { return r == FinishReason::kStop ? "stop" : r == FinishReason::kLength ? "length" : "abort"; }

Json byte_list(const std::string& s) {
  Json out = Json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

// Chat's log-prob entry of one token.
Json chat_logprob(const Tokenizer& tokenizer, int32_t token, float logprob, const std::vector<TokenLogprob>* top) {
  const std::string piece = tokenizer.decode({token});
  Json entry = {{"token", piece}, {"logprob", logprob}, {"bytes", byte_list(piece)}, {"top_logprobs", Json::array()}};
  if (top != nullptr) {
    for (const auto& t : *top) {
      const std::string alt = tokenizer.decode({t.token});
      entry["top_logprobs"].push_back({{"token", alt}, {"logprob", t.logprob}, {"bytes", byte_list(alt)}});
    }
  }
  return entry;
}

// Completions' log-probs of tokens [begin, end) of a sample, text offsets from `offset`.
Json completion_logprobs(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, const std::vector<float>& logprobs,
                         const std::vector<std::vector<TokenLogprob>>& top, size_t begin, size_t end, size_t offset,
                         bool with_top) {
  Json tokens = Json::array(), values = Json::array(), tops = Json::array(), offsets = Json::array();
  for (size_t k = begin; k < end; ++k) {
    const std::string piece = tokenizer.decode({ids[k]});
    tokens.push_back(piece);
    values.push_back(logprobs[k]);
    offsets.push_back(offset);
    offset += piece.size();
    if (with_top) {
      Json alts = Json::object();
      if (k < top.size()) {
        for (const auto& t : top[k]) alts[tokenizer.decode({t.token})] = t.logprob;
      }
      tops.push_back(alts);
    }
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", with_top ? tops : Json(nullptr)},
          {"text_offset", offsets}};
}

int64_t prompt_tokens(const ApiRequest& r) {
  int64_t n = 0;
  for (const auto& p : r.prompts) n += static_cast<int64_t>(p.size());
  return n;
}

// The longest text that is whole UTF-8 (a multi-byte character cut at the end is held back).
size_t whole_utf8(const std::string& s) {
  size_t end = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, s.size()); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back) end = s.size() - back;
    break;
  }
  return end;
}

// A chat answer as the API gives it: its text as the content; under tool calling, when the text
// holds calls that all parse, the text before them as the content (null when there is none) and
// the calls as tool_calls (ids `call_id`_k, arguments as a JSON string). A call that does not parse
// leaves the whole text the content, for the client to read.
struct ChatTurn {
  Json content;
  Json tool_calls;  // null: none
};

ChatTurn chat_turn(const ApiRequest& r, const std::string& text, const std::string& call_id) {
  ChatTurn turn{text, nullptr};
  if (!r.tool_calls) return turn;
  const auto calls = parse_tool_calls(text, r.tool_format);
  if (calls.empty() || std::any_of(calls.begin(), calls.end(), [](const ToolCall& c) { return !c.error.empty(); })) return turn;
  std::string before = r.tool_format == ToolFormat::kHermes ? text.substr(0, text.find("<tool_call>")) : std::string();
  before.erase(before.find_last_not_of(" \t\r\n") + 1);
  turn.content = before.empty() ? Json(nullptr) : Json(before);
  turn.tool_calls = Json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    turn.tool_calls.push_back({{"id", fmt::format("{}_{}", call_id, k)}, {"type", "function"},
                               {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments.dump()}}}});
  }
  return turn;
}

// The finish reason of a sample ended for `reason` whose turn is `turn`.
const char* chat_finish(FinishReason reason, const ChatTurn& turn) {
  return reason == FinishReason::kStop && !turn.tool_calls.is_null() ? "tool_calls" : finish_text(reason);
}

// Tool call ids of choice `index` of response `id`: "call_" and the response's own part.
std::string call_id(const std::string& id, int64_t index) {
  const size_t dash = id.rfind('-');
  return fmt::format("call_{}_{}", dash == std::string::npos ? id : id.substr(dash + 1), index);
}

}  // namespace

Json api_response(const ApiRequest& r, const std::vector<ApiChoice>& choices, const std::string& id, int64_t created,
                  int64_t policy_version, const Tokenizer& tokenizer) {
  const bool chat = r.endpoint == ApiEndpoint::kChat;
  Json out = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
              {"model", r.model}, {"choices", Json::array()}};
  int64_t completion_tokens = 0;
  for (const auto& c : choices) {
    const auto& s = c.sample;
    completion_tokens += static_cast<int64_t>(s.token_ids.size());
    Json choice = {{"index", c.index}};
    const ChatTurn turn = chat ? chat_turn(r, s.text, call_id(id, c.index)) : ChatTurn{};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", turn.content}};
      if (!turn.tool_calls.is_null()) choice["message"]["tool_calls"] = turn.tool_calls;
      if (r.logprobs) {
        Json content = Json::array();
        for (size_t k = 0; k < s.token_ids.size(); ++k) {
          content.push_back(chat_logprob(tokenizer, s.token_ids[k], s.logprobs[k],
                                         k < s.top_logprobs.size() ? &s.top_logprobs[k] : nullptr));
        }
        choice["logprobs"] = {{"content", content}};
      } else {
        choice["logprobs"] = nullptr;
      }
    } else {
      choice["text"] = s.text;
      choice["logprobs"] = r.logprobs ? completion_logprobs(tokenizer, s.token_ids, s.logprobs, s.top_logprobs, 0,
                                                            s.token_ids.size(), 0, r.params.logprobs > 0)
                                      : Json(nullptr);
    }
    choice["finish_reason"] = chat ? chat_finish(s.finish_reason, turn) : finish_text(s.finish_reason);
    choice["token_ids"] = s.token_ids;
    if (!chat) choice["prompt_token_ids"] = r.prompts[static_cast<size_t>(c.prompt)];
    out["choices"].push_back(choice);
  }
  if (chat) out["prompt_token_ids"] = r.prompts.front();
  out["usage"] = {{"prompt_tokens", prompt_tokens(r)}, {"completion_tokens", completion_tokens},
                  {"total_tokens", prompt_tokens(r) + completion_tokens}};
  out["policy_version"] = policy_version;
  return out;
}

std::string api_stream_event(const ApiRequest& r, ApiStreamState& state, int64_t index, int64_t prompt,
                             const StepToken& token, const GeneratedSample* final_sample, const std::string& id,
                             int64_t created, int64_t policy_version, const Tokenizer& tokenizer) {
  const bool chat = r.endpoint == ApiEndpoint::kChat;
  state.tokens.push_back(token.token);
  // The text this token lets go: whole UTF-8, and not the start of a stop string still to come.
  std::string text;
  if (final_sample != nullptr) {
    text = final_sample->text;
  } else {
    text = tokenizer.decode(state.tokens, true);
    size_t hold = 0;
    for (const auto& stop : r.params.stop_strings) hold = std::max(hold, stop.empty() ? 0 : stop.size() - 1);
    text.resize(whole_utf8(text.substr(0, text.size() - std::min(hold, text.size()))));
  }
  // Under tool calling a chat's text waits for its last chunk, which says whether it called tools.
  if (chat && r.tool_calls && final_sample == nullptr) text.clear();
  std::string delta = text.size() > state.sent_bytes ? text.substr(state.sent_bytes) : std::string();
  state.sent_bytes = std::max(state.sent_bytes, text.size());
  Json choice = {{"index", index}};
  const char* finish = token.finished ? finish_text(token.reason) : nullptr;
  if (chat) {
    Json message = state.started ? Json::object() : Json({{"role", "assistant"}});
    message["content"] = delta;
    if (r.tool_calls && final_sample != nullptr) {
      const ChatTurn turn = chat_turn(r, final_sample->text, call_id(id, index));
      if (!turn.tool_calls.is_null()) {
        message["content"] = turn.content;
        message["tool_calls"] = turn.tool_calls;
        for (size_t k = 0; k < message["tool_calls"].size(); ++k) message["tool_calls"][k]["index"] = k;
      }
      if (finish != nullptr) finish = chat_finish(token.reason, turn);
    }
    choice["delta"] = message;
    choice["logprobs"] = r.logprobs ? Json({{"content", Json::array({chat_logprob(tokenizer, token.token, token.logprob,
                                                                                   r.params.logprobs > 0 ? &token.top : nullptr)})}})
                                    : Json(nullptr);
  } else {
    choice["text"] = delta;
    if (r.logprobs) {
      const std::vector<std::vector<TokenLogprob>> top = {token.top};
      choice["logprobs"] = completion_logprobs(tokenizer, {token.token}, {token.logprob}, top, 0, 1, state.sent_bytes - delta.size(),
                                               r.params.logprobs > 0);
    } else {
      choice["logprobs"] = nullptr;
    }
  }
  choice["finish_reason"] = finish != nullptr ? Json(finish) : Json(nullptr);
  choice["token_ids"] = std::vector<int32_t>{token.token};
  Json chunk = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                {"model", r.model}, {"choices", Json::array({choice})}};
  if (!state.started) {  // vLLM: the prompt's ids come with a choice's first chunk
    if (chat) {
      chunk["prompt_token_ids"] = r.prompts[static_cast<size_t>(prompt)];
    } else {
      chunk["choices"][0]["prompt_token_ids"] = r.prompts[static_cast<size_t>(prompt)];
    }
  }
  chunk["policy_version"] = policy_version;
  state.started = true;
  return "data: " + chunk.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::string api_stream_end(const ApiRequest& r, const std::vector<ApiChoice>& choices, const std::string& id,
                           int64_t created, int64_t policy_version) {
  std::string out;
  if (r.include_usage) {
    int64_t completion = 0;
    for (const auto& c : choices) completion += static_cast<int64_t>(c.sample.token_ids.size());
    Json chunk = {{"id", id}, {"object", r.endpoint == ApiEndpoint::kChat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created}, {"model", r.model}, {"choices", Json::array()},
                  {"usage", {{"prompt_tokens", prompt_tokens(r)}, {"completion_tokens", completion},
                             {"total_tokens", prompt_tokens(r) + completion}}},
                  {"policy_version", policy_version}};
    out += "data: " + chunk.dump() + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

// --- the client's side ----------------------------------------------------------------------

nlohmann::json completion_request_body(const GenerationRequest& g, const std::string& model, int64_t max_model_len) {
  const SamplingParams& p = g.params;
  int64_t max_tokens = p.max_new_tokens;
  if (max_model_len > 0) {
    max_tokens = std::max<int64_t>(1, std::min<int64_t>(max_tokens, max_model_len - static_cast<int64_t>(g.prompt_ids.size())));
  }
  nlohmann::json body = {{"model", model},
                         {"prompt", g.prompt_ids},
                         {"n", g.n},
                         {"max_tokens", max_tokens},
                         {"temperature", p.temperature},
                         {"top_p", p.top_p},
                         {"top_k", p.top_k > 0 ? p.top_k : -1},
                         {"min_p", p.min_p},
                         {"seed", g.seed},
                         {"stop_token_ids", p.stop_token_ids},
                         {"logprobs", 0},
                         {"return_token_ids", true},
                         {"skip_special_tokens", true}};
  if (!p.stop_strings.empty()) body["stop"] = p.stop_strings;
  return body;
}

std::vector<GeneratedSample> parse_completion_samples(const std::string& body, int64_t n, int64_t fallback_version,
                                                      const std::string& url) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  auto fail = [&](const std::string& what) -> std::vector<GeneratedSample> {
    throw_user_error("{}/v1/completions: {}", url, what);
  };
  if (j.is_discarded() || !j.is_object()) return fail("the answer is not a JSON object");
  if (!j.contains("choices") || !j["choices"].is_array()) return fail("the answer has no choices array");
  const auto& choices = j["choices"];
  if (static_cast<int64_t>(choices.size()) != n) return fail(fmt::format("{} choices for n = {}", choices.size(), n));
  int64_t version = fallback_version;
  if (j.contains("policy_version") && j["policy_version"].is_number_integer()) version = j["policy_version"].get<int64_t>();
  std::vector<GeneratedSample> out(static_cast<size_t>(n));
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (const auto& c : choices) {
    if (!c.is_object() || !c.contains("index") || !c["index"].is_number_integer()) return fail("a choice without an index");
    const int64_t index = c["index"].get<int64_t>();
    if (index < 0 || index >= n || seen[static_cast<size_t>(index)]) return fail(fmt::format("choice index {} for n = {}", index, n));
    seen[static_cast<size_t>(index)] = true;
    GeneratedSample& s = out[static_cast<size_t>(index)];
    s.request = 0;
    s.sample = index;
    s.policy_version = version;
    if (!c.contains("token_ids") || !c["token_ids"].is_array()) {
      return fail("a choice without token_ids: rlcpp trains on the exact token ids, which it asks for with "
                  "\"return_token_ids\": true (vLLM >= 0.10.2, rlcpp serve)");
    }
    for (const auto& t : c["token_ids"]) {
      if (!t.is_number_integer()) return fail("token_ids holds a non-integer");
      s.token_ids.push_back(t.get<int32_t>());
    }
    const nlohmann::json* logprobs = c.contains("logprobs") && c["logprobs"].is_object() ? &c["logprobs"] : nullptr;
    if (logprobs == nullptr || !logprobs->contains("token_logprobs") || !(*logprobs)["token_logprobs"].is_array()) {
      return fail("a choice without logprobs.token_logprobs (asked for with \"logprobs\": 0)");
    }
    for (const auto& v : (*logprobs)["token_logprobs"]) {
      if (!v.is_number()) return fail("logprobs.token_logprobs holds a non-number");
      s.logprobs.push_back(v.get<float>());
    }
    if (s.logprobs.size() != s.token_ids.size()) {
      return fail(fmt::format("{} token ids but {} log-probs in a choice", s.token_ids.size(), s.logprobs.size()));
    }
    s.text = c.contains("text") && c["text"].is_string() ? c["text"].get<std::string>() : std::string();
    const std::string reason = c.contains("finish_reason") && c["finish_reason"].is_string() ? c["finish_reason"].get<std::string>() : "";
    if (reason == "stop") {
      s.finish_reason = FinishReason::kStop;
    } else if (reason == "length") {
      s.finish_reason = FinishReason::kLength;
    } else if (reason == "abort") {
      s.finish_reason = FinishReason::kAbort;
    } else {
      return fail(fmt::format("finish_reason \"{}\" (expected stop or length)", reason));
    }
  }
  return out;
}

}  // namespace rlcpp
