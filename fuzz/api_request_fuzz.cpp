// libFuzzer target for the OpenAI API's request parser (`rlcpp serve`): each input is a request
// body, parsed as a /v1/completions and as a /v1/chat/completions request against the server's
// limits for the bundled arith-tiny model (its tokenizer and chat template, loaded once from
// models/arith-tiny: run from the repository root, as fuzz/run.sh does), and again against tight
// limits (short prompt and request-token limits, no position or vocabulary check). A bad body is
// an ApiError with the status (4xx) and parameter the client is answered; nothing else may escape
// (the server answers any other exception with a 500), and nothing may crash. No UserError can
// arise here: the tokenizer encodes any bytes, and the prompt builder neither limits nor drops
// (the server's options), so one that escapes is a finding too.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "openai/protocol.h"
#include "text/prompt_builder.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace {

struct Served {
  std::shared_ptr<rlcpp::Tokenizer> tokenizer = rlcpp::Tokenizer::from_dir("models/arith-tiny");
  rlcpp::PromptBuilder prompts{*tokenizer, [] {
                                 rlcpp::PromptOptions p;
                                 p.context_tokens = 0;  // as the server: length checks are the parser's (413)
                                 return p;
                               }()};
  rlcpp::ApiLimits server, tight;
  Served() {
    // What `rlcpp serve --model models/arith-tiny --adapter lora=DIR` checks against.
    server.models = {"arith-tiny", "lora"};
    server.max_positions = 256;  // config.json's max_position_embeddings
    server.vocab_size = 296;
    server.stop_token_ids = {295};  // <|im_end|>
    tight.models = {"arith-tiny"};
    tight.max_prompt_tokens = 8;
    tight.max_request_tokens = 64;  // n x (prompt + max_tokens) over the prompts (--max-request-tokens)
    tight.default_max_tokens = 1;
    tight.max_n = 4;
    tight.max_logprobs = 2;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Served served;
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (const rlcpp::ApiLimits* limits : {&served.server, &served.tight}) {
    for (auto endpoint : {rlcpp::ApiEndpoint::kCompletions, rlcpp::ApiEndpoint::kChat}) {
      try {
        rlcpp::parse_api_request(endpoint, body, *limits, *served.tokenizer, served.prompts);
      } catch (const rlcpp::ApiError& e) {
        if (e.status < 400 || e.status >= 500) __builtin_trap();  // a bad request is the client's: 4xx
        e.body();
      }
    }
  }
  return 0;
}
