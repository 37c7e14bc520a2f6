// Rollouts from the rollout workers to the data-parallel trainers. Each kept group goes to exactly
// one trainer replica (never to all): a worker first sends trainer rank 0 a manifest (each kept
// group's tokens, the filtered-out groups, the round's figures), trainer rank 0 assigns the round's
// groups over the replicas — equal group counts so every replica can fill its -tbs, tokens
// balanced within that — and each worker then sends every replica its share in one message.
// Under tensor parallelism an engine's first rank delivers and a replica's first rank collects
// (it hands the groups to the replica's other ranks).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/topology.h"
#include "rl/rollout/rollout.h"
#include "rl/rollout/rollout_source.h"

namespace rlcpp {

// Which trainer takes each group: heaviest groups first, each to the trainer holding the fewest
// groups (then the fewest tokens). `held_groups`/`held_tokens`: what each trainer already holds.
std::vector<int> assign_groups(const std::vector<int64_t>& group_tokens, std::vector<int64_t> held_groups,
                               std::vector<int64_t> held_tokens);

// Messages between ranks: JSON in its compact binary form (MessagePack). A message that does not
// decode is an InternalError naming `what`.
std::string pack_message(const nlohmann::json& message);
nlohmann::json unpack_message(const std::string& bytes, const char* what);

// Compact binary form of groups, for messages and checkpoints.
std::string encode_groups(const std::vector<SampleGroup>& groups);
std::vector<SampleGroup> decode_groups(const std::string& bytes);

class RolloutChannel {
 public:
  // Between the replicas' and the engines' first ranks of `topology`.
  explicit RolloutChannel(const Topology& topology);

  // An engine's first rank: sends one finished round.
  void deliver(RolloutRound& round, int64_t policy_version);
  // A replica's first rank: receives one round from every engine; its share of the kept groups
  // joins `buffer`.
  RoundReceipt collect(std::deque<SampleGroup>& buffer);

 private:
  const Topology& topo_;
  int T_, I_;  // replicas, engines
};

}  // namespace rlcpp
