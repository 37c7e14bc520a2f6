// Control messages from trainer rank 0 to the rollout workers, typed: what each carries is a
// field, and a message that does not decode (or an op this build does not know) is an
// InternalError naming it, never a silently ignored string.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "rl/rollout/rollout.h"

namespace rlcpp {

// Message tags on the world communicator (the rollout channel and the weight sync use their own).
enum ControlTag : int { kControlTag = 11, kHashTag = 12, kShareTag = 13, kInFlightTag = 14, kRewardTag = 15 };

struct ControlMessage {
  enum class Op {
    kSync,   // receive the weights the leader is about to send (WeightSync); `verify`: send back their hash
    kRound,  // generate `picks` with the current weights (and `switches`) and deliver the round (RolloutChannel)
    kStop,   // the run is over
    kResume, // a resumed run: go on with the round a checkpoint cut (`in_flight`, as the engine sent it) and deliver it
  };
  Op op = Op::kStop;
  bool verify = false;            // kSync
  std::vector<PromptPick> picks;  // kRound
  WeightSwitches switches;        // kRound: the versions it takes while it generates (partial rollouts)
  nlohmann::json in_flight;       // kResume
  std::vector<PromptPick> next;   // kRound, --stream-prompts: the next round's, streamed into free slots

  static ControlMessage sync(bool verify) { return {Op::kSync, verify, {}, {}, nullptr, {}}; }
  static ControlMessage round(std::vector<PromptPick> picks, WeightSwitches switches = {}, std::vector<PromptPick> next = {}) {
    return {Op::kRound, false, std::move(picks), std::move(switches), nullptr, std::move(next)};
  }
  static ControlMessage resume(nlohmann::json in_flight) { return {Op::kResume, false, {}, {}, std::move(in_flight), {}}; }
  static ControlMessage stop() { return {Op::kStop, false, {}, {}, nullptr, {}}; }
};

std::string encode_control(const ControlMessage& message);
ControlMessage decode_control(const std::string& bytes);

// Sends `message` from trainer rank 0 to world rank `dest`; receives one from trainer rank 0.
void send_control(Communicator& world, const ControlMessage& message, int dest);
ControlMessage recv_control(Communicator& world);

}  // namespace rlcpp
