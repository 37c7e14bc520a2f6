// `rlcpp serve` and the remote rollout client: the OpenAI request parser (typed errors, and a
// property test over random bodies), the server in this process over loopback against the engine
// (completions, streaming, 200 concurrent streams, errors, weight and adapter updates), and
// RemoteRollout against it (equal to the engine, past a dead server, adapters pushed).
#include <httplib.h>
#include <torch/torch.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "openai/remote_rollout.h"
#include "openai/protocol.h"
#include "openai/server.h"
#include "text/chat_template.h"
#include "text/prompt_builder.h"
#include "text/tool_calls.h"
#include "text/tokenizer.h"
#include "real_tokenizer.h"
#include "test_util.h"
#include "util/error.h"

using namespace rlcpp;
using Json = nlohmann::json;
using rlcpp::testing::TempDir;

namespace {

const std::filesystem::path kModel = std::filesystem::path(RLCPP_SOURCE_DIR) / "models" / "arith-tiny";

EngineConfig engine_config() {
  EngineConfig e;
  e.n_blocks = 512;
  e.scheduler.max_num_seqs = 64;
  return e;
}

ApiLimits limits_of(const Transformer& model, const Tokenizer& tokenizer) {
  ApiLimits l;
  l.models = {"arith-tiny"};
  l.max_positions = model.config().max_position_embeddings;
  l.vocab_size = model.config().vocab_size;
  l.stop_token_ids = default_stop_tokens(model.config(), tokenizer);
  return l;
}

// A server of `model` on a free loopback port, served on its own thread until destroyed.
class RunningServer {
 public:
  RunningServer(std::shared_ptr<Transformer> model, std::shared_ptr<const Tokenizer> tokenizer, ServeOptions options = {}) {
    options.port = 0;
    if (options.model_name.empty()) options.model_name = "arith-tiny";
    server_ = std::make_unique<Server>(std::move(model), std::move(tokenizer), engine_config(), options);
    thread_ = std::thread([this] {
      try {
        server_->serve([this](int port) { port_.set_value(port); });
      } catch (...) {
        port_.set_exception(std::current_exception());
      }
    });
    port = port_.get_future().get();
  }
  ~RunningServer() {
    server_->stop();
    thread_.join();
  }
  Server& server() { return *server_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  int port = 0;

 private:
  std::unique_ptr<Server> server_;
  std::promise<int> port_;
  std::thread thread_;
};

httplib::Result post(int port, const std::string& path, const Json& body, const httplib::Headers& headers = {}) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(120, 0);
  return client.Post(path.c_str(), headers, body.dump(), "application/json");
}

GenerationRequest request_of(std::vector<int32_t> prompt, int64_t n, uint64_t seed, int64_t max_tokens,
                             const std::vector<int32_t>& stop_ids) {
  GenerationRequest g;
  g.prompt_ids = std::move(prompt);
  g.n = n;
  g.seed = seed;
  g.params.temperature = 1.0;
  g.params.max_new_tokens = max_tokens;
  g.params.stop_token_ids = stop_ids;
  return g;
}

// The token ids and log-probs of every choice of a /v1/completions answer, by choice index.
std::vector<GeneratedSample> choices_of(const std::string& body, int64_t n) {
  return parse_completion_samples(body, n, 0, "test");
}

// The bundled model with rank-4 adapters whose B is random (a fresh one is zero: no change).
std::shared_ptr<Transformer> adapted_model(double alpha, uint64_t seed) {
  auto model = Transformer::from_pretrained(kModel);
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = alpha;
  model->add_adapters(lora, 3);
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (const auto& [name, t] : model->trained_weights()) {
    if (name.ends_with("lora_B.weight")) t.copy_(torch::randn(t.sizes(), t.options()) * 0.5);
  }
  return model;
}

struct Fixture {
  std::shared_ptr<Tokenizer> tokenizer = Tokenizer::from_dir(kModel);
  std::shared_ptr<Transformer> model = Transformer::from_pretrained(kModel);
  std::vector<int32_t> stop_ids = default_stop_tokens(model->config(), *tokenizer);
  std::vector<int32_t> prompt(int k) const { return tokenizer->encode(fmt::format("What is {} + {}?", 17 * k + 3, 29 + k), true); }
};

}  // namespace

TEST(ServeApi, ParsesCompletionsAndChatRequests) {
  Fixture f;
  PromptBuilder prompts(*f.tokenizer, PromptOptions{});
  const ApiLimits limits = limits_of(*f.model, *f.tokenizer);
  const auto r = parse_api_request(ApiEndpoint::kCompletions,
                                   R"({"model": "arith-tiny", "prompt": [5, 6, 7], "n": 3, "max_tokens": 9, "temperature": 0.7,
                                       "top_k": 5, "top_p": 0.9, "min_p": 0.05, "seed": 11, "stop": ["=", "\n"],
                                       "logprobs": 2, "stream": true, "stream_options": {"include_usage": true}})",
                                   limits, *f.tokenizer, prompts);
  EXPECT_EQ(r.prompts, (std::vector<std::vector<int32_t>>{{5, 6, 7}}));
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.params.max_new_tokens, 9);
  EXPECT_DOUBLE_EQ(r.params.temperature, 0.7);
  EXPECT_EQ(r.params.top_k, 5);
  EXPECT_DOUBLE_EQ(r.params.min_p, 0.05);
  EXPECT_EQ(r.seed, 11u);
  EXPECT_TRUE(r.seeded && r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_EQ(r.params.stop_strings, (std::vector<std::string>{"=", "\n"}));
  EXPECT_EQ(r.params.stop_token_ids, f.stop_ids);  // the model's end of turn always stops
  // A batch of text prompts, tokenized as `rlcpp generate --raw` does.
  const auto batch = parse_api_request(ApiEndpoint::kCompletions, R"({"prompt": ["1 + 1 =", "2 + 2 ="]})", limits,
                                       *f.tokenizer, prompts);
  ASSERT_EQ(batch.prompts.size(), 2u);
  EXPECT_EQ(batch.prompts[1], f.tokenizer->encode("2 + 2 =", true));
  EXPECT_EQ(batch.params.max_new_tokens, 16);  // OpenAI's default for completions
  // A chat: the model's template with the generation prompt.
  const auto chat = parse_api_request(ApiEndpoint::kChat,
                                      R"({"messages": [{"role": "user", "content": "What is 2 + 3?"}], "logprobs": true,
                                          "top_logprobs": 3, "max_completion_tokens": 20})",
                                      limits, *f.tokenizer, prompts);
  PromptRecord record;
  record.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "What is 2 + 3?"}}});
  PromptBuilder again(*f.tokenizer, PromptOptions{});
  EXPECT_EQ(chat.prompts.front(), again.build(record)->ids);
  EXPECT_EQ(chat.params.logprobs, 3);
  EXPECT_EQ(chat.params.max_new_tokens, 20);
}

TEST(ServeApi, BadRequestsAreFourHundredsNamingTheParameter) {
  Fixture f;
  PromptBuilder prompts(*f.tokenizer, PromptOptions{});
  ApiLimits limits = limits_of(*f.model, *f.tokenizer);
  limits.max_prompt_tokens = 50;
  struct Case {
    ApiEndpoint endpoint;
    std::string body;
    int status;
    std::string param;
  };
  const std::string long_prompt = Json(std::vector<int>(60, 7)).dump();
  const std::vector<Case> cases = {
      {ApiEndpoint::kCompletions, "{", 400, ""},
      {ApiEndpoint::kCompletions, "[1, 2]", 400, ""},
      {ApiEndpoint::kCompletions, R"({})", 400, "prompt"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "model": "gpt-4"})", 404, "model"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "temperature": "hot"})", 400, "temperature"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "min_p": 1})", 400, "min_p"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "n": 0})", 400, "n"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "n": 1.5})", 400, "n"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "max_tokens": 100000})", 400, "max_tokens"},
      {ApiEndpoint::kCompletions, R"({"prompt": [1, 99999]})", 400, "prompt"},
      {ApiEndpoint::kCompletions, R"({"prompt": [1, -1]})", 400, "prompt"},
      {ApiEndpoint::kCompletions, R"({"prompt": []})", 400, "prompt"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "stop": 5})", 400, "stop"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "logprobs": 50})", 400, "logprobs"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "seed": "s"})", 400, "seed"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "presence_penalty": 1})", 400, "presence_penalty"},
      {ApiEndpoint::kCompletions, R"({"prompt": "x", "stream_options": {}})", 400, "stream_options"},
      {ApiEndpoint::kCompletions, R"({"prompt": )" + long_prompt + "}", 413, "prompt"},
      {ApiEndpoint::kChat, R"({"messages": []})", 400, "messages"},
      {ApiEndpoint::kChat, R"({"messages": [{"role": "robot", "content": "hi"}]})", 400, "messages[0].role"},
      {ApiEndpoint::kChat, R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
      {ApiEndpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400, "top_logprobs"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 120));
    try {
      parse_api_request(c.endpoint, c.body, limits, *f.tokenizer, prompts);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, c.status) << e.message;
      EXPECT_EQ(e.param, c.param) << e.message;
      const Json body = Json::parse(e.body());  // OpenAI's error object
      EXPECT_EQ(body["error"]["message"], e.message);
      EXPECT_FALSE(e.message.empty());
    }
  }
}

// Tool calling on real chat templates (Qwen3's Hermes calls, Llama 3.1's JSON ones): the tools and
// a finished call round are rendered as the template renders them; an answer's call comes back as
// tool_calls, whole and streamed; tool_choice "none" leaves it text; what cannot be served is a 400.
TEST(ServeApi, ToolsAreRenderedAndAnswersCallsComeBackAsToolCalls) {
  using OJson = nlohmann::ordered_json;
  const OJson tools = OJson::parse(R"([{"type": "function", "function": {"name": "calculator", "description": "Evaluates arithmetic.",
      "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}])");
  const std::string messages = R"([{"role": "user", "content": "What is 1234 * 5678?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "calculator", "arguments": "{\"expression\": \"1234 * 5678\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "7006652"}])";
  for (const std::string name : {"qwen3", "llama3_1"}) {
    SCOPED_TRACE(name);
    auto tok = rlcpp::testing::real_tokenizer(name, name == "llama3_1" ? "llama3.1.jinja" : "");
    PromptBuilder prompts(*tok, PromptOptions{});
    ApiLimits limits;
    limits.models = {"m"};
    limits.tool_format = template_tool_format(*tok);
    EXPECT_EQ(limits.tool_format, name == "qwen3" ? ToolFormat::kHermes : ToolFormat::kLlama3);
    const std::string body = R"({"messages": )" + messages + R"(, "tools": )" + tools.dump() + "}";
    const auto r = parse_api_request(ApiEndpoint::kChat, body, limits, *tok, prompts);
    EXPECT_TRUE(r.tool_calls);
    // The prompt: the template given the tools and the call with its arguments as an object.
    OJson expected_messages = OJson::parse(messages);
    expected_messages[1]["content"] = "";
    expected_messages[1]["tool_calls"][0]["function"]["arguments"] = OJson{{"expression", "1234 * 5678"}};
    const std::string text = ChatTemplate(*tok).render(expected_messages, true, OJson{{"tools", tools}});
    EXPECT_EQ(r.prompts.front(), tok->encode(text, false));
    for (const char* shown : {"Evaluates arithmetic.", "1234 * 5678", "7006652"}) EXPECT_NE(text.find(shown), std::string::npos) << shown;

    // An answer that calls the tool.
    const std::string said = name == "qwen3" ? "Let me compute it.\n" : "";
    ApiChoice choice;
    choice.sample.text = said + format_tool_call("calculator", OJson{{"expression", "2 * 3"}}, limits.tool_format);
    choice.sample.token_ids = tok->encode(choice.sample.text, false);
    choice.sample.finish_reason = FinishReason::kStop;
    const Json whole = api_response(r, {choice}, "chatcmpl-7", 0, 0, *tok);
    const Json& message = whole["choices"][0]["message"];
    EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(message["content"], name == "qwen3" ? Json("Let me compute it.") : Json(nullptr));
    ASSERT_EQ(message["tool_calls"].size(), 1u);
    EXPECT_EQ(message["tool_calls"][0]["type"], "function");
    EXPECT_EQ(message["tool_calls"][0]["id"], "call_7_0_0");
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "calculator");
    EXPECT_EQ(Json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()), Json({{"expression", "2 * 3"}}));
    // Streamed: the text waits for the last chunk, which carries the calls.
    ApiStreamState state;
    Json last;
    const auto& ids = choice.sample.token_ids;
    for (size_t k = 0; k < ids.size(); ++k) {
      StepToken token;
      token.token = ids[k];
      token.finished = k + 1 == ids.size();
      token.reason = FinishReason::kStop;
      const std::string event = api_stream_event(r, state, 0, 0, token, token.finished ? &choice.sample : nullptr, "chatcmpl-7",
                                                 0, 0, *tok);
      const Json chunk = Json::parse(event.substr(6));
      if (!token.finished) EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "") << k;
      last = chunk["choices"][0];
    }
    EXPECT_EQ(last["finish_reason"], "tool_calls");
    EXPECT_EQ(last["delta"]["tool_calls"][0]["index"], 0);
    EXPECT_EQ(last["delta"]["tool_calls"][0]["function"], message["tool_calls"][0]["function"]);
    // tool_choice "none": the same answer is text.
    const auto plain = parse_api_request(ApiEndpoint::kChat, body.substr(0, body.size() - 1) + R"(, "tool_choice": "none"})",
                                         limits, *tok, prompts);
    const Json text_answer = api_response(plain, {choice}, "chatcmpl-7", 0, 0, *tok)["choices"][0];
    EXPECT_EQ(text_answer["message"]["content"], choice.sample.text);
    EXPECT_FALSE(text_answer["message"].contains("tool_calls"));
    EXPECT_EQ(text_answer["finish_reason"], "stop");
    // Requests that cannot be served, by the parameter at fault.
    const std::vector<std::pair<std::string, std::string>> refused = {
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools[0]"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + tools.dump() + R"(, "tool_choice": "required"})", "tool_choice"},
        {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
            "function": {"name": "calculator", "arguments": "1 +"}}]}]})", "messages[1].tool_calls[0].function.arguments"},
    };
    for (const auto& [bad_body, param] : refused) {
      try {
        parse_api_request(ApiEndpoint::kChat, bad_body, limits, *tok, prompts);
        ADD_FAILURE() << "accepted " << bad_body;
      } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400) << e.message;
        EXPECT_EQ(e.param, param) << e.message;
      }
    }
    EXPECT_THROW(parse_api_request(ApiEndpoint::kCompletions, R"({"prompt": "x", "tools": )" + tools.dump() + "}", limits, *tok,
                                   prompts),
                 ApiError);
  }
}

// Random request bodies: JSON objects of the API's field names (and some others) with values of
// random types and sizes, and every tenth body random bytes.
class RandomBodies {
 public:
  explicit RandomBodies(uint64_t seed) : rng_(seed) {}
  std::string next() {
    std::string body;
    if (++count_ % 10 == 0) {  // not JSON at all
      body.resize(rng_() % 40);
      for (auto& ch : body) ch = static_cast<char>(rng_() % 256);
      return body;
    }
    Json o = Json::object();
    if (rng_() % 3 != 0) o["prompt"] = value(1);
    if (rng_() % 3 == 0) o["messages"] = Json::array({{{"role", "user"}, {"content", value(2)}}});
    for (size_t n = rng_() % 6; n > 0; --n) o[key()] = value(1);
    return o.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  const std::string& key() {
    static const std::vector<std::string> keys = {
        "model", "prompt", "messages", "n", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
        "min_p", "seed", "stop", "stop_token_ids", "logprobs", "top_logprobs", "stream", "stream_options", "best_of",
        "echo", "suffix", "logit_bias", "presence_penalty", "role", "content", "include_usage", "tools",
        "tool_choice", "tool_calls", "tool_call_id", "function", "arguments", "type", "name", "response_format", "return_token_ids", "ignore_eos", "x"};
    return keys[rng_() % keys.size()];
  }
  Json value(int depth) {
    switch (rng_() % (depth > 2 ? 7 : 9)) {
      case 0: return nullptr;
      case 1: return rng_() % 2 == 0;
      case 2: return static_cast<int64_t>(rng_() % 7) - 2;
      case 3: return static_cast<int64_t>(rng_());  // huge, negative when read signed
      case 4: return std::ldexp(static_cast<double>(rng_() % 2000) - 1000, static_cast<int>(rng_() % 80) - 40);
      case 5: return std::string(rng_() % 5, "ab=\n\xc3\xa9"[rng_() % 6]);
      case 6: return key();
      case 7: {
        Json a = Json::array();
        for (size_t k = rng_() % 5; k > 0; --k) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        Json o = Json::object();
        for (size_t k = rng_() % 6; k > 0; --k) o[key()] = value(depth + 1);
        return o;
      }
    }
  }
  std::mt19937_64 rng_;
  int64_t count_ = 0;
};

// The parser accepts random bodies or answers a 4xx ApiError; nothing else escapes it.
TEST(ServeApi, RandomBodiesAreParsedOrRefusedWithFourHundreds) {
  Fixture f;
  PromptBuilder prompts(*f.tokenizer, PromptOptions{});
  const ApiLimits limits = limits_of(*f.model, *f.tokenizer);
  RandomBodies bodies(1234);
  int64_t accepted = 0, refused = 0;
  for (int k = 0; k < 4000; ++k) {
    const std::string body = bodies.next();
    const auto endpoint = bodies.rng()() % 2 == 0 ? ApiEndpoint::kCompletions : ApiEndpoint::kChat;
    try {
      parse_api_request(endpoint, body, limits, *f.tokenizer, prompts);
      ++accepted;
    } catch (const ApiError& e) {
      EXPECT_GE(e.status, 400) << body;
      EXPECT_LT(e.status, 500) << body << " -> " << e.message;
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an ApiError: " << e.what() << " for " << body;
    }
  }
  // Both outcomes happen, or the generator tests nothing.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(refused, 1000);
}

// The same over HTTP, to a running server: 200 for what it accepts, a 4xx JSON error for the rest,
// and it still answers afterwards.
TEST(Serve, RandomBodiesOverHttpGetAnswersAndTheServerLives) {
  Fixture f;
  RunningServer server(f.model, f.tokenizer);
  RandomBodies bodies(99);
  httplib::Client client("127.0.0.1", server.port);
  client.set_read_timeout(120, 0);
  int64_t ok = 0, refused = 0;
  for (int k = 0; k < 300; ++k) {
    const std::string body = bodies.next();
    const char* path = bodies.rng()() % 2 == 0 ? "/v1/completions" : "/v1/chat/completions";
    const auto res = client.Post(path, body, "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error()) << " for " << body;
    if (res->status == 200) {
      ++ok;
      continue;
    }
    EXPECT_GE(res->status, 400) << body;
    EXPECT_LT(res->status, 500) << body << " -> " << res->body;
    const Json error = Json::parse(res->body, nullptr, false);
    EXPECT_TRUE(!error.is_discarded() && error.contains("error")) << res->body;
    ++refused;
  }
  EXPECT_GT(ok, 3);
  EXPECT_GT(refused, 100);
  const auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(RemoteRollout, AnswersWithoutTokenIdsOrLogprobsAreNamed) {
  const std::string good = R"({"choices": [{"index": 1, "text": "b", "token_ids": [4], "logprobs": {"token_logprobs": [-0.5]},
                                            "finish_reason": "stop"},
                                           {"index": 0, "text": "a", "token_ids": [3, 5], "logprobs": {"token_logprobs": [-1, -2]},
                                            "finish_reason": "length"}], "policy_version": 7})";
  const auto samples = parse_completion_samples(good, 2, 0, "http://s");
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].token_ids, (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(samples[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(samples[1].logprobs, (std::vector<float>{-0.5f}));
  EXPECT_EQ(samples[1].policy_version, 7);
  EXPECT_THROW_MSG(parse_completion_samples(R"({"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}]})", 1, 0, "http://s"),
                   UserError, "http://s/v1/completions", "token_ids", "return_token_ids");
  EXPECT_THROW_MSG(parse_completion_samples(R"({"choices": [{"index": 0, "token_ids": [1], "finish_reason": "stop"}]})", 1, 0, "u"),
                   UserError, "token_logprobs");
  EXPECT_THROW_MSG(parse_completion_samples(good, 3, 0, "u"), UserError, "2 choices for n = 3");
  EXPECT_THROW_MSG(parse_completion_samples("<html>", 1, 0, "u"), UserError, "not a JSON object");
  auto servers = [](std::vector<std::string> urls) {
    RemoteRolloutOptions options;
    options.urls = std::move(urls);
    return options;
  };
  EXPECT_THROW_MSG(RemoteRollout(servers({"http://a:1", "a:1/v1/"})), UserError, "given twice");
  EXPECT_THROW_MSG(RemoteRollout(servers({"http://a/b"})), UserError, "--rollout-url", "HOST:PORT");
}

TEST(Serve, CompletionsAndStreamsEqualTheEngine) {
  Fixture f;
  RunningServer server(f.model, f.tokenizer);
  Engine engine(f.model, engine_config(), f.tokenizer);
  for (int k = 0; k < 3; ++k) {
    const auto expected = engine.generate({request_of(f.prompt(k), 3, 100 + k, 12, f.stop_ids)});
    const Json body = {{"prompt", f.prompt(k)}, {"n", 3}, {"seed", 100 + k}, {"max_tokens", 12}, {"logprobs", 0}};
    const auto res = post(server.port, "/v1/completions", body);
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    ASSERT_EQ(res->status, 200) << res->body;
    const auto got = choices_of(res->body, 3);
    const Json answer = Json::parse(res->body);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(got[s].token_ids, expected[s].token_ids);
      EXPECT_EQ(got[s].logprobs, expected[s].logprobs);  // the same engine and weights: bit for bit
      EXPECT_EQ(answer["choices"][s]["text"], expected[s].text);
      EXPECT_EQ(answer["choices"][s]["prompt_token_ids"], Json(f.prompt(k)));
    }
    EXPECT_EQ(answer["policy_version"], 0);
    EXPECT_EQ(answer["usage"]["completion_tokens"], got[0].token_ids.size() + got[1].token_ids.size() + got[2].token_ids.size());
    // The same request streamed: the chunks' tokens and text add up to the answer.
    Json streamed = body;
    streamed["stream"] = true;
    streamed["stream_options"] = {{"include_usage", true}};
    const auto sse = post(server.port, "/v1/completions", streamed);
    ASSERT_TRUE(sse);
    ASSERT_EQ(sse->status, 200);
    std::vector<std::vector<int32_t>> ids(3);
    std::vector<std::string> text(3);
    std::vector<std::string> reasons(3);
    bool done = false, usage = false;
    std::istringstream lines(sse->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("data: ", 0) != 0) continue;
      if (line == "data: [DONE]") {
        done = true;
        continue;
      }
      const Json chunk = Json::parse(line.substr(6));
      if (chunk["choices"].empty()) {
        usage = chunk.contains("usage");
        continue;
      }
      const auto& c = chunk["choices"][0];
      const int i = c["index"];
      for (int32_t t : c["token_ids"].get<std::vector<int32_t>>()) ids[i].push_back(t);
      text[i] += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) reasons[i] = c["finish_reason"];
    }
    EXPECT_TRUE(done && usage);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(ids[s], expected[s].token_ids);
      EXPECT_EQ(text[s], expected[s].text);
      EXPECT_EQ(reasons[s], to_string(expected[s].finish_reason));
    }
  }
}

// The load test: 200 clients stream at once; every stream ends with [DONE] and the tokens its
// seed gives alone.
TEST(Serve, TwoHundredConcurrentStreamsAllComplete) {
  Fixture f;
  ServeOptions options;
  options.max_connections = 256;
  RunningServer server(f.model, f.tokenizer, options);
  Engine engine(f.model, engine_config(), f.tokenizer);
  constexpr int kClients = 200;
  std::vector<GenerationRequest> requests;
  for (int k = 0; k < kClients; ++k) requests.push_back(request_of(f.prompt(k % 7), 1, 1000 + k, 8, f.stop_ids));
  const auto expected = engine.generate(requests);
  std::vector<std::vector<int32_t>> got(kClients);
  std::vector<int> complete(kClients, 0);
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> clients;
  for (int k = 0; k < kClients; ++k) {
    clients.emplace_back([&, k] {
      httplib::Client client("127.0.0.1", server.port);
      client.set_read_timeout(300, 0);
      client.set_connection_timeout(60, 0);
      const Json body = {{"prompt", requests[k].prompt_ids}, {"seed", 1000 + k}, {"max_tokens", 8}, {"stream", true}};
      std::string buffer;
      auto res = client.Post("/v1/completions", httplib::Headers{}, body.dump(), "application/json");
      if (!res || res->status != 200) {
        errors[k] = res ? fmt::format("status {}: {}", res->status, res->body) : httplib::to_string(res.error());
        return;
      }
      std::istringstream lines(res->body);
      for (std::string line; std::getline(lines, line);) {
        if (line == "data: [DONE]") complete[k] = 1;
        if (line.rfind("data: {", 0) != 0) continue;
        const Json chunk = Json::parse(line.substr(6));
        for (int32_t t : chunk["choices"][0]["token_ids"].get<std::vector<int32_t>>()) got[k].push_back(t);
      }
    });
  }
  for (auto& t : clients) t.join();
  int n_complete = 0;
  for (int k = 0; k < kClients; ++k) {
    n_complete += complete[k];
    EXPECT_EQ(got[k], expected[k].token_ids) << "client " << k << ": " << errors[k];
  }
  EXPECT_EQ(n_complete, kClients);
}

TEST(Serve, ErrorsCarryTheirStatusAndTheServerGoesOn) {
  Fixture f;
  ServeOptions options;
  options.api_key = "sesame";
  options.max_prompt_tokens = 40;
  RunningServer server(f.model, f.tokenizer, options);
  const httplib::Headers auth = {{"Authorization", "Bearer sesame"}};
  auto status = [&](const std::string& path, const Json& body, const httplib::Headers& headers) {
    const auto res = post(server.port, path, body, headers);
    return res ? res->status : -1;
  };
  EXPECT_EQ(status("/v1/completions", {{"prompt", "1 + 1 ="}}, {}), 401);
  EXPECT_EQ(status("/v1/completions", {{"prompt", "1 + 1 ="}}, {{"Authorization", "Bearer wrong"}}), 401);
  EXPECT_EQ(status("/v1/completions", {{"prompt", "1 + 1 ="}, {"model", "nope"}}, auth), 404);
  EXPECT_EQ(status("/v1/completions", {{"prompt", std::vector<int>(41, 5)}}, auth), 413);
  EXPECT_EQ(status("/v1/completions", {{"prompt", "1"}, {"top_p", 2}}, auth), 400);
  EXPECT_EQ(status("/v1/nothing", Json::object(), auth), 404);
  EXPECT_EQ(status("/update_weights_from_disk", {{"model_path", "/no/such/dir"}}, auth), 400);
  EXPECT_EQ(status("/v1/load_lora_adapter", {{"lora_name", "a"}, {"lora_path", kModel.string()}}, auth), 400);
  EXPECT_EQ(status("/v1/unload_lora_adapter", {{"lora_name", "never-loaded"}}, auth), 404);
  // /health and /metrics need no key; the server still answers.
  httplib::Client client("127.0.0.1", server.port);
  const auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("rlcpp_requests_failed_total"), std::string::npos);
  EXPECT_NE(metrics->body.find("rlcpp_kv_cache_usage_ratio"), std::string::npos);
  EXPECT_EQ(status("/v1/completions", {{"prompt", "1 + 1 ="}, {"max_tokens", 3}}, auth), 200);
  // Anywhere but loopback, a key is required.
  ServeOptions open;
  open.host = "0.0.0.0";
  EXPECT_THROW_MSG(Server(f.model, f.tokenizer, engine_config(), open), UserError, "--api-key");
}

TEST(Serve, WeightsFromDiskAndAdaptersChangeAnswersAndVersion) {
  Fixture f;
  TempDir tmp;
  // Other weights on disk: the model with its weights scaled.
  auto changed = Transformer::from_pretrained(kModel);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : changed->parameters()) p.mul_(1.5);
  }
  changed->save_pretrained(tmp / "changed");
  // An adapter of the same base.
  auto adapted = adapted_model(8, 5);
  adapted->save_adapter(tmp / "adapter", kModel.string());

  auto served = Transformer::from_pretrained(kModel);
  RunningServer server(served, f.tokenizer);
  const auto g = request_of(f.prompt(1), 2, 7, 10, f.stop_ids);
  const Json body = {{"prompt", g.prompt_ids}, {"n", 2}, {"seed", 7}, {"max_tokens", 10}, {"logprobs", 0}};
  Engine changed_engine(changed, engine_config(), f.tokenizer);
  Engine adapted_engine(adapted, engine_config(), f.tokenizer);
  const auto want_changed = changed_engine.generate({g});
  const auto want_adapted = adapted_engine.generate({g});

  auto res = post(server.port, "/v1/load_lora_adapter", {{"lora_name", "tuned"}, {"lora_path", (tmp / "adapter").string()}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json with_adapter = body;
  with_adapter["model"] = "tuned";
  res = post(server.port, "/v1/completions", with_adapter);
  ASSERT_EQ(res->status, 200) << res->body;
  auto got = choices_of(res->body, 2);
  for (int s = 0; s < 2; ++s) EXPECT_EQ(got[s].token_ids, want_adapted[s].token_ids);
  EXPECT_EQ(Json::parse(res->body)["policy_version"], 1);
  httplib::Client client("127.0.0.1", server.port);
  const Json models = Json::parse(client.Get("/v1/models")->body);
  EXPECT_EQ(models["data"].size(), 2u);

  res = post(server.port, "/v1/unload_lora_adapter", {{"lora_name", "tuned"}});
  ASSERT_EQ(res->status, 200) << res->body;
  res = post(server.port, "/v1/completions", with_adapter);
  EXPECT_EQ(res->status, 404);  // unloaded

  res = post(server.port, "/update_weights_from_disk", {{"model_path", (tmp / "changed").string()}, {"policy_version", 9}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body)["policy_version"], 9);
  res = post(server.port, "/v1/completions", body);
  ASSERT_EQ(res->status, 200) << res->body;
  got = choices_of(res->body, 2);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(got[s].token_ids, want_changed[s].token_ids);
    EXPECT_EQ(got[s].logprobs, want_changed[s].logprobs);
  }
  EXPECT_EQ(Json::parse(res->body)["policy_version"], 9);
}

TEST(RemoteRollout, EqualsTheEngineAcrossServersAndPastADeadOne) {
  Fixture f;
  RunningServer a(Transformer::from_pretrained(kModel), f.tokenizer);
  RunningServer b(Transformer::from_pretrained(kModel), f.tokenizer);
  // A port nobody listens on (bound, read, closed): a server that is down from the start.
  int dead_port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    dead_port = ntohs(address.sin_port);
    ::close(fd);
  }
  RemoteRolloutOptions options;
  options.urls = {"http://127.0.0.1:" + std::to_string(dead_port), a.url() + "/v1", b.url()};
  options.max_requests_per_server = 2;
  options.unavailable_timeout_s = 30;
  RemoteRollout remote(options);
  remote.set_weights({0, {}, false});
  std::vector<GenerationRequest> requests;
  for (int k = 0; k < 9; ++k) requests.push_back(request_of(f.prompt(k), 4, 50 + k, 10, f.stop_ids));
  Engine engine(f.model, engine_config(), f.tokenizer);
  const auto expected = engine.generate(requests);
  const auto got = remote.generate(requests);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].request, expected[k].request);
    EXPECT_EQ(got[k].sample, expected[k].sample);
    EXPECT_EQ(got[k].token_ids, expected[k].token_ids);
    EXPECT_EQ(got[k].text, expected[k].text);
    // Other batches on the servers (up to 8 rows) than in the one engine (36): products of other
    // row counts sum in other orders (the kernels' dot-product tiles below 9 rows, outer-product
    // tiles above; BLAS alike), and on these raw prompts, outside the chat template the model was
    // trained on, its logits are large enough that this moves a log-prob by up to 6.4e-5 on an
    // AVX-512 (Zen 4) machine, 4.6e-5 with LibTorch's products (RLCPP_KERNELS=0). The same tokens
    // and text above are the exact part of the check.
    ASSERT_EQ(got[k].logprobs.size(), expected[k].logprobs.size());
    for (size_t t = 0; t < got[k].logprobs.size(); ++t) EXPECT_NEAR(got[k].logprobs[t], expected[k].logprobs[t], 1e-4);
  }
  const auto stats = remote.stats();
  EXPECT_EQ(stats.requests, 9);  // one answer taken per prompt
  EXPECT_GE(stats.server_failures, 1);
}

TEST(RemoteRollout, PushedAdaptersAndModelsReachEveryServer) {
  Fixture f;
  TempDir tmp;
  auto adapted = adapted_model(4, 9);
  adapted->save_adapter(tmp / "v3", kModel.string());
  RunningServer a(Transformer::from_pretrained(kModel), f.tokenizer);
  RunningServer b(Transformer::from_pretrained(kModel), f.tokenizer);
  RemoteRolloutOptions options;
  options.urls = {a.url(), b.url()};
  RemoteRollout remote(options);
  remote.set_weights({3, tmp / "v3", true});
  remote.sync();
  std::vector<GenerationRequest> requests;
  for (int k = 0; k < 4; ++k) requests.push_back(request_of(f.prompt(k), 2, 70 + k, 10, f.stop_ids));
  Engine engine(adapted, engine_config(), f.tokenizer);
  const auto expected = engine.generate(requests);
  const auto got = remote.generate(requests);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].token_ids, expected[k].token_ids);
    EXPECT_EQ(got[k].policy_version, 3);
  }
  EXPECT_EQ(remote.stats().pushes, 2);  // one per server
  // Each serves the adapter under the version's name.
  httplib::Client client("127.0.0.1", a.port);
  const Json models = Json::parse(client.Get("/v1/models")->body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][1]["id"], "rlcpp-policy-v3");
}
