// What generates a run's rollouts: the built-in engine (engine.h), or OpenAI-compatible servers
// reached over HTTP (remote_rollout.h). The RL loop only asks for samples; each sample says which
// policy version produced it.
//
// Multi-turn rollouts (generate_turns): a sample's turn ends at a stop token or its turn limit; its
// TurnHandler says whether it goes on and with which inserted tokens (a tool's answer rendered by
// the chat template). The engine continues the sequence from its KV blocks; any other backend
// sends each turn as a new request carrying the whole sequence so far.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <vector>

#include "engine/sampling.h"

namespace rlcpp {

// What follows a turn: the trajectory goes on with `inserted` appended (never sampled) and a new
// turn of at most `turn_limit` tokens (0: up to the response budget), or it ends.
struct TurnOutcome {
  bool go_on = false;
  std::vector<int32_t> inserted;
  int64_t turn_limit = 0;
};

// A turn that ended: the sample, the tokens the model sampled in it, why it ended and how many
// response tokens the trajectory holds with it (model and inserted).
struct TurnEnd {
  int64_t request = 0, sample = 0;
  std::vector<int32_t> turn_ids;
  FinishReason reason = FinishReason::kStop;
  int64_t response_tokens = 0;
};

class TurnHandler {
 public:
  virtual ~TurnHandler() = default;
  // The first turn's token limit of request `request`'s samples (0: none).
  virtual int64_t first_turn_limit(int64_t /*request*/) const { return 0; }
  // The engine's steps between a turn's end and its resumption (at least 1): the answer is awaited
  // there if not ready, so the schedule never depends on how long it took.
  virtual int64_t resume_lag() const { return 1; }
  // Called on the generating thread as each turn ends; the outcome may be computed on another
  // thread (a tool running). Every call is answered before generate_turns returns.
  virtual std::shared_future<TurnOutcome> turn_ended(const TurnEnd& end) = 0;
};

// Where a generate call may end before every request has: `group_of[r]` is request r's group
// (-1: in none, so it never ends the call), and the call ends once `groups` groups have finished.
// The first n requests of a call, each a group of its own, is "the first n" (--stream-prompts).
// None named (the default): the call generates every request whole.
struct EarlyStop {
  std::vector<int64_t> group_of;
  int64_t groups = 0;
  static EarlyStop first(size_t n_first, size_t n_requests);
};

class RolloutBackend {
 public:
  virtual ~RolloutBackend() = default;
  // Every request's n samples, ordered by (request, sample); each sample's policy_version is that
  // of the weights that produced it.
  virtual std::vector<GeneratedSample> generate(const std::vector<GenerationRequest>& requests) = 0;
  // A call that ends early (--stream-prompts, --group-order completion): once `stop.groups` of the
  // groups `stop.group_of` names have every request finished, the other requests end too, with the
  // tokens they have (FinishReason::kAbort, to be continued). A backend that cannot generates them
  // all whole.
  virtual std::vector<GeneratedSample> generate_until(const std::vector<GenerationRequest>& requests,
                                                      const EarlyStop& /*stop*/) {
    return generate(requests);
  }
  // Multi-turn: every request's n trajectories, ordered as generate's. A trajectory's token_ids
  // are every token after the prompt, its `inserted` runs those the handler gave, and its
  // finish_reason that of its last turn (kLength when the response budget, max_new_tokens, ended
  // it).
  std::vector<GeneratedSample> generate_turns(const std::vector<GenerationRequest>& requests, TurnHandler& handler) {
    return generate_turns(requests, handler, EarlyStop{});
  }
  // The same, ending early as generate_until does once `stop.groups` groups have every trajectory
  // ended (no stop named: every one whole). The turns that ended get their answers first; a
  // trajectory that goes on then ends there, with its tokens and inserted runs (kAbort). This
  // default sends each turn as a request of the whole sequence so far, all trajectories waiting
  // for a turn in one generate call, turn k of sample s seeded from (seed, s, k), and generates
  // every trajectory whole; the engine overrides it to continue sequences in place.
  virtual std::vector<GeneratedSample> generate_turns(const std::vector<GenerationRequest>& requests, TurnHandler& handler,
                                                      const EarlyStop& stop);
  // Whether the last generate call was cut short (Engine::cut_generation): its samples that end
  // with FinishReason::kAbort are to be continued (PiecedSample::continuation).
  virtual bool cut() const { return false; }
};

// A sample generated in pieces, each a request continuing the whole sequence so far (a partial
// rollout's chunks over rollout servers, a round cut at a checkpoint): the pieces' tokens,
// log-probs and versions joined into one sample.
struct PiecedSample {
  GeneratedSample out;  // its request and sample are the caller's; policy_version -1 until a token
  int64_t pieces = 0;   // pieces appended
  // Appends the next piece (its versions, any version change and inserted run, kept per token).
  void append(GeneratedSample piece);
  // The request going on from it: `original`'s prompt with the response so far, one sample of at
  // most `limit` response tokens in all, seeded from the original's seed, the sample and the
  // pieces so far (the same continuation however often it is made).
  GenerationRequest continuation(const GenerationRequest& original, int64_t limit) const;
};

// Whether a trajectory with `response` tokens so far can take `inserted` and still sample one
// (every backend's generate_turns judges a turn's continuation by it).
inline bool room_for(int64_t response, const std::vector<int32_t>& inserted, const SamplingParams& params) {
  return response + static_cast<int64_t>(inserted.size()) < params.max_new_tokens;
}

// A ready outcome (a handler's answer computed on the calling thread).
std::shared_future<TurnOutcome> ready_outcome(TurnOutcome outcome);

}  // namespace rlcpp
