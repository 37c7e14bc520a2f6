// Multi-turn episodes: what happens between the model's turns. After each turn an episode parses
// the turn's tool calls and runs them (the built-in tools), or gives the turn to the external
// environment, and answers with the tokens to insert: the new messages rendered alone by the chat
// template (text/turn_render.h), never a re-encoding of what the model sampled. It keeps the
// conversation, the limits (turns, tool calls), the environment's rewards and, at the end, the
// token-exactness check of the whole sequence against the template.
//
// The engine side (how a sequence continues, which thread waits) is the agent loop's, in rl.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "env/environment.h"
#include "env/tools.h"
#include "text/chat_template.h"
#include "text/tool_calls.h"
#include "text/tokenizer.h"
#include "text/turn_render.h"

namespace rlcpp {

class SandboxPool;

// The episode layer's settings (RunConfig::episode, YAML group `episode`).
struct EpisodeOptions {
  std::string tools;                // --tools: "python,calculator" or a JSON file of function schemas
  std::string env_cmd;              // --env-cmd: an external environment
  int64_t env_workers = 1;          // --env-workers
  int64_t max_turns = 4;            // --max-turns: assistant turns per trajectory
  int64_t max_tool_calls = 4;       // --max-tool-calls per trajectory
  int64_t max_tokens_per_turn = 0;  // --max-tokens-per-turn (0: the response budget -mnt)
  double tool_timeout = 10.0;       // --tool-timeout: seconds for one tool call or environment reply
  int64_t max_tool_output = 256;    // --max-tool-output: tokens of one tool answer kept
  bool env_reward_add = false;      // --env-reward add: the -rt reward plus the environment's (else -rt env)
  int64_t resume_lag = 1;           // --tool-overlap-steps: engine steps a finished turn's tools may take
  std::string tool_format;          // --tool-format hermes|llama3 ("": from the chat template)
  bool multi_turn() const { return !tools.empty() || !env_cmd.empty(); }
};

// Why a trajectory ended.
enum class EpisodeEnd { kAnswer, kMaxTurns, kMaxToolCalls, kLength, kTurnLength, kEnvDone, kEnvError, kAbort };
const EnumTable<EpisodeEnd>& episode_ends();

// What every episode of a run shares: the tokenizer, the chat template with its variables (the
// tools' schemas), the renderer of inserted turns, the tools and the environment.
class Agent {
 public:
  // `template_variables`: the run's own (enable_thinking, ...); the tools' schemas are added.
  // `pool` runs the python tool (null without it).
  Agent(const Tokenizer& tokenizer, EpisodeOptions options, nlohmann::ordered_json template_variables,
        SandboxPool* pool, SandboxLimits limits);
  ~Agent();

  const EpisodeOptions& options() const { return options_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const ChatTemplate& chat() const { return chat_; }
  const TurnRenderer& renderer() const { return *renderer_; }
  const ToolSet& tools() const { return tools_; }
  ExternalEnvironment* environment() const { return env_.get(); }
  ToolFormat format() const { return format_; }
  // The template variables prompts are rendered with (the tools' schemas among them).
  const nlohmann::ordered_json& template_variables() const { return variables_; }

 private:
  const Tokenizer& tokenizer_;
  EpisodeOptions options_;
  ChatTemplate chat_;
  nlohmann::ordered_json variables_;
  std::unique_ptr<TurnRenderer> renderer_;
  ToolSet tools_;
  std::unique_ptr<ExternalEnvironment> env_;
  ToolFormat format_ = ToolFormat::kHermes;
};

// One message of a trajectory after its prompt, as rollout records show it.
struct EpisodeTurn {
  std::string role, content;
  int64_t n_tokens = 0;  // an inserted run's tokens are on its first message
  bool trained = false;
};

// What follows a turn (see TurnOutcome in engine/rollout_backend.h).
struct EpisodeNext {
  bool go_on = false;
  std::vector<int32_t> inserted;
  int64_t turn_limit = 0;
};

class Episode {
 public:
  // `id`: unique in the run (the environment's episode id); `record`: the dataset line.
  Episode(const Agent& agent, int64_t id, nlohmann::ordered_json prompt_messages, nlohmann::json record);

  // The environment's start: the observation to add to the prompt as a user message, or none.
  // Then the prompt's messages and text are those rendered (with_observation).
  std::optional<std::string> start();
  // The prompt's text as rendered into its ids (empty when it was truncated: nothing to check).
  void set_prompt_text(std::string text) { expected_ = std::move(text); checkable_ = !expected_.empty(); }
  const nlohmann::ordered_json& prompt_messages() const { return messages_; }

  // A turn ended: the tokens the model sampled in it, whether a stop token ended it (else its
  // turn limit), and the trajectory's response tokens so far with the budget (-mnt). Runs the
  // turn's tool calls or the environment's step; safe on any thread (one call per episode at a time).
  EpisodeNext turn(const std::vector<int32_t>& ids, bool stopped, int64_t response_tokens, int64_t budget);
  // A last turn the response budget cut (it was never reported as ended): recorded, nothing run.
  void last_turn(const std::vector<int32_t>& ids);
  // The trajectory's end (`length`: the response budget ended it): the environment's end and the
  // token-exactness check of `ids` (prompt and response) with `sampled` per token.
  void finish(bool length, const std::vector<int32_t>& ids, const std::vector<uint8_t>& sampled);

  const std::vector<EpisodeTurn>& turns() const { return turns_; }
  // The last assistant turn's text: what the -rt reward grades.
  const std::string& final_text() const { return final_text_; }
  int64_t n_turns() const { return n_turns_; }
  int64_t n_tool_calls() const { return n_tool_calls_; }
  int64_t n_tool_errors() const { return n_tool_errors_; }
  int64_t n_inserted() const { return n_inserted_; }
  EpisodeEnd ended_by() const { return ended_by_; }
  double env_reward() const { return env_reward_; }
  bool env_failed() const { return env_failed_; }
  const TitoCheck& tito() const { return tito_; }
  bool tito_checked() const { return checkable_; }
  // The episode between two of its turns, for a round a checkpoint cuts in the middle of its
  // episodes; restore() gives it back to an episode made with the same agent, id, prompt messages
  // and record. A malformed state is an InternalError naming `where`.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state, const std::string& where);
  // The summary rollout records and metrics read: turns, tool_calls, tool_errors, inserted_tokens,
  // ended_by, tito (and its detail), env_reward.
  nlohmann::json summary() const;

 private:
  EpisodeNext end(EpisodeEnd why);
  // Records an assistant turn of `ids` (its stop token, when `stopped`, kept out of its content).
  void record_turn(const std::vector<int32_t>& ids, bool stopped);
  // The messages' text and ids after the model's turn that ended with `stop`.
  EpisodeNext insert(const nlohmann::ordered_json& messages, int32_t stop, int64_t response_tokens, int64_t budget);
  std::string clip(const std::string& answer) const;

  const Agent& agent_;
  int64_t id_;
  nlohmann::ordered_json messages_;  // the whole conversation so far
  nlohmann::json record_;
  std::string expected_;  // the text the sequence was built from
  bool checkable_ = false;
  std::vector<EpisodeTurn> turns_;
  std::string final_text_;
  int64_t n_turns_ = 0, n_tool_calls_ = 0, n_tool_errors_ = 0, n_inserted_ = 0;
  EpisodeEnd ended_by_ = EpisodeEnd::kAnswer;
  double env_reward_ = 0;
  bool env_failed_ = false, started_ = false;
  TitoCheck tito_;
};

}  // namespace rlcpp
