// The OpenAI API's wire format, both sides of it. The server's (`rlcpp serve`): request bodies of
// /v1/completions and /v1/chat/completions parsed and checked into typed requests (a bad one is an
// ApiError with the HTTP status and the parameter it names, in OpenAI's error form), and the
// responses built from the engine's samples: whole JSON bodies and server-sent-event chunks. The
// client's (remote rollouts): a generation request as a /v1/completions body of token ids, and the
// answer's samples. Pure functions of their inputs (no HTTP, no engine), so the parsers are fuzzed
// and tested alone.
//
// Beside OpenAI's fields, following vLLM's extensions: `top_k`, `min_p`, `stop_token_ids`,
// `ignore_eos`, `return_token_ids`, prompts as token ids; every choice carries `token_ids` (the completion's)
// and completions' choices `prompt_token_ids` (chat responses carry it at the top level), and every
// response `policy_version`, the weights' version that produced it.
//
// Tool calling (chat): `tools` (function schemas) are rendered by the model's chat template as
// transformers renders them; assistant turns with `tool_calls` and `tool` turns are taken back; an
// answer's calls, written in the template's format (Hermes' <tool_call> or Llama 3.1's JSON), are
// returned as `tool_calls` with finish_reason "tool_calls" (streamed: in the choice's last chunk).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampling.h"
#include "text/tool_calls.h"

namespace rlcpp {

class Tokenizer;
class PromptBuilder;

// An error answered to the client: HTTP status, OpenAI's error type, message, parameter.
struct ApiError : std::exception {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // "" when no single parameter is at fault
  std::string code;   // OpenAI's code ("model_not_found", ...), or ""
  ApiError(int status, std::string message, std::string param = {}, std::string code = {});
  const char* what() const noexcept override { return message.c_str(); }
  std::string body() const;  // {"error": {"message", "type", "param", "code"}}
};

enum class ApiEndpoint { kCompletions, kChat };

struct ApiRequest {
  ApiEndpoint endpoint = ApiEndpoint::kCompletions;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;  // one or more (completions may batch prompts)
  SamplingParams params;                      // stop strings and stop tokens included
  int64_t n = 1;                              // samples per prompt
  uint64_t seed = 0;                          // sample s of prompt k: seed (seed + k, s), as rlcpp generate
  bool seeded = false;                        // the client gave a seed
  bool stream = false;
  bool include_usage = false;                 // stream_options.include_usage
  bool logprobs = false;                      // report each token's log-prob (params.logprobs alternatives)
  bool return_token_ids = false;              // vLLM's switch (rlcpp always sends them)
  nlohmann::ordered_json tools;               // chat: the tools offered, as given (null: none)
  bool tool_calls = false;                    // answers' calls come back as tool_calls (tools, tool_choice auto)
  ToolFormat tool_format = ToolFormat::kHermes;  // how the model writes a call (ApiLimits')
};

// What the parser checks requests against.
struct ApiLimits {
  std::vector<std::string> models;  // the names served (base first)
  int64_t max_positions = 0;        // the model's: prompt + max_tokens must fit (0: unchecked)
  int64_t max_prompt_tokens = 0;    // longer prompts are refused with 413 (0: positions less one)
  int64_t default_max_tokens = 16;  // completions' OpenAI default; chat: up to the positions
  int64_t max_request_tokens = 0;   // n x (prompt + max_tokens) over the prompts: more is 413 (0: unchecked)
  int64_t max_n = 128;
  int64_t max_logprobs = 20;
  int64_t vocab_size = 0;
  std::vector<int32_t> stop_token_ids;  // the model's end-of-turn tokens, always stops
  ToolFormat tool_format = ToolFormat::kHermes;  // the chat template's way of writing tool calls
};

// A request body of `endpoint`: text prompts tokenized as `rlcpp generate --raw` does, chats
// rendered by `prompts` (the model's chat template with the generation prompt). Throws ApiError.
ApiRequest parse_api_request(ApiEndpoint endpoint, const std::string& body, const ApiLimits& limits,
                             const Tokenizer& tokenizer, PromptBuilder& prompts);

// One choice of an answer: a sample of prompt `prompt`, its text decoded (a stop string cut).
struct ApiChoice {
  int64_t index = 0, prompt = 0;
  GeneratedSample sample;
};

// The whole answer to a request (not streamed).
nlohmann::ordered_json api_response(const ApiRequest& request, const std::vector<ApiChoice>& choices,
                                    const std::string& id, int64_t created, int64_t policy_version,
                                    const Tokenizer& tokenizer);

// Streaming: the text of a choice sent so far, and what a new token adds to it. Text is sent once
// it is whole UTF-8 and can no longer turn into a stop string; the last chunk sends the rest.
struct ApiStreamState {
  std::vector<int32_t> tokens;
  size_t sent_bytes = 0;
  bool started = false;  // the first chunk (chat: the assistant's role) went out
};
// The "data: {...}\n\n" event of choice `index` (a sample of prompt `prompt`) for its new `token`;
// when the token finished the sample, with its finish reason and the rest of `final_sample`'s text.
std::string api_stream_event(const ApiRequest& request, ApiStreamState& state, int64_t index, int64_t prompt,
                             const StepToken& token, const GeneratedSample* final_sample, const std::string& id,
                             int64_t created, int64_t policy_version, const Tokenizer& tokenizer);
// The closing events: the usage chunk when asked for, then "data: [DONE]\n\n".
std::string api_stream_end(const ApiRequest& request, const std::vector<ApiChoice>& choices, const std::string& id,
                           int64_t created, int64_t policy_version);

// --- the client's side ----------------------------------------------------------------------

// A /v1/completions body for one request's n samples: its prompt as token ids, the sampling
// settings and seed, token ids and log-probs asked back (vLLM's return_token_ids, logprobs 0).
// `max_model_len` (0: unknown) caps max_tokens as the built-in engine does: a response ends at the
// model's last position.
nlohmann::json completion_request_body(const GenerationRequest& request, const std::string& model, int64_t max_model_len);

// One server's /v1/completions answer to a request of `n` samples: the samples (request 0) or a
// UserError naming `url` and what is missing.
std::vector<GeneratedSample> parse_completion_samples(const std::string& body, int64_t n, int64_t fallback_version,
                                                      const std::string& url);

}  // namespace rlcpp
