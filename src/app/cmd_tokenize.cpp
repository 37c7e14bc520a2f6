// `rlcpp tokenize --model DIR [--chat] [--json] TEXT|-`: the ids and pieces rlcpp's tokenizer
// produces, for checking a model's tokenizer against another implementation.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "app/commands.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace rlcpp {

namespace {

struct TokenizeArgs {
  std::string model;
  std::string text;
  bool chat = false;
  bool json = false;
  bool add_special_tokens = false;
  bool decode = false;
};

void print_one(const Tokenizer& tokenizer, const ChatTemplate* chat, const TokenizeArgs& args, const std::string& text) {
  const std::string input = chat ? chat->render({{{"role", "user"}, {"content", text}}}, true) : text;
  const auto ids = tokenizer.encode(input, args.add_special_tokens);
  if (args.json) {
    nlohmann::json out;
    out["ids"] = ids;
    auto& pieces = out["pieces"] = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tokenizer.id_to_token(id));
    if (args.decode) out["decoded"] = tokenizer.decode(ids);
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  for (int32_t id : ids) std::cout << fmt::format("{:>8}  {}\n", id, tokenizer.id_to_token(id));
  std::cout << fmt::format("{} tokens\n", ids.size());
}

void run_tokenize(const TokenizeArgs& args) {
  auto tokenizer = Tokenizer::from_dir(args.model);
  std::unique_ptr<ChatTemplate> chat;
  if (args.chat) chat = std::make_unique<ChatTemplate>(*tokenizer);
  if (args.text != "-") {
    print_one(*tokenizer, chat.get(), args, args.text);
    return;
  }
  std::string line;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    std::string text = line;
    if (args.json) {
      try {
        text = nlohmann::json::parse(line).get<std::string>();
      } catch (const nlohmann::json::exception& e) {
        throw_user_error("stdin line {}: with --json each input line must be a JSON string: {}", line_no, e.what());
      }
    }
    print_one(*tokenizer, chat.get(), args, text);
  }
}

// Renders each stdin line {"messages": [...], "add_generation_prompt": bool, ...variables} and
// prints the result as a JSON string, one line each.
void run_template(const std::string& model) {
  auto tokenizer = Tokenizer::from_dir(model);
  ChatTemplate chat(*tokenizer);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    nlohmann::ordered_json request;
    try {
      request = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw_user_error("stdin line {}: not JSON: {}", line_no, e.what());
    }
    if (!request.is_object() || !request.contains("messages")) {
      throw_user_error("stdin line {}: expected {{\"messages\": [...], \"add_generation_prompt\": ...}}", line_no);
    }
    const bool generation_prompt = request.value("add_generation_prompt", false);
    nlohmann::ordered_json extra = request;
    extra.erase("messages");
    extra.erase("add_generation_prompt");
    std::cout << nlohmann::json(chat.render(request["messages"], generation_prompt, extra)).dump() << "\n";
  }
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("template", "render chat-template requests read as JSON lines from stdin");
  auto model = std::make_shared<std::string>();
  cmd->add_option("--model", *model, "model directory with tokenizer_config.json")->required();
  cmd->callback([model] { run_template(*model); });
}

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "print the token ids and pieces of a text");
  auto args = std::make_shared<TokenizeArgs>();
  cmd->add_option("--model", args->model, "model directory with tokenizer.json")->required();
  cmd->add_option("text", args->text, "text to tokenize, or - to read lines from stdin")->required();
  cmd->add_flag("--chat", args->chat, "render the text as a user message through the chat template first");
  cmd->add_flag("--json", args->json,
                "one JSON object {\"ids\", \"pieces\"} per input; with -, each stdin line is a JSON string");
  cmd->add_flag("--add-special-tokens", args->add_special_tokens, "let the post-processor add BOS/EOS");
  cmd->add_flag("--decode", args->decode, "with --json: also print the decoded text");
  cmd->callback([args] { run_tokenize(*args); });
}

}  // namespace rlcpp
