#include "rl/rollout/rollout_channel.h"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

enum Tag : int { kManifest = 21, kAssignment = 22, kGroups = 23 };

}  // namespace

std::string pack_message(const nlohmann::json& message) {
  const auto bytes = nlohmann::json::to_msgpack(message);
  return {bytes.begin(), bytes.end()};
}

nlohmann::json unpack_message(const std::string& bytes, const char* what) {
  try {
    return nlohmann::json::from_msgpack(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw InternalError(fmt::format("a corrupt {} message ({} bytes): {}", what, bytes.size(), e.what()));
  }
}

std::vector<int> assign_groups(const std::vector<int64_t>& group_tokens, std::vector<int64_t> held_groups,
                               std::vector<int64_t> held_tokens) {
  RLCPP_CHECK(!held_groups.empty() && held_groups.size() == held_tokens.size(), "assigning groups to no trainer");
  std::vector<size_t> order(group_tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return group_tokens[a] > group_tokens[b]; });
  std::vector<int> to(group_tokens.size(), 0);
  for (size_t g : order) {
    size_t best = 0;
    for (size_t t = 1; t < held_groups.size(); ++t) {
      if (held_groups[t] < held_groups[best] || (held_groups[t] == held_groups[best] && held_tokens[t] < held_tokens[best])) {
        best = t;
      }
    }
    to[g] = static_cast<int>(best);
    ++held_groups[best];
    held_tokens[best] += group_tokens[g];
  }
  return to;
}

std::string encode_groups(const std::vector<SampleGroup>& groups) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& g : groups) list.push_back(to_json(g));
  return pack_message(list);
}

std::vector<SampleGroup> decode_groups(const std::string& bytes) {
  std::vector<SampleGroup> groups;
  for (const auto& g : unpack_message(bytes, "rollout groups")) groups.push_back(group_from_json(g));
  return groups;
}

RolloutChannel::RolloutChannel(const Topology& topology)
    : topo_(topology), T_(topology.num_replicas()), I_(topology.num_engines()) {}

void RolloutChannel::deliver(RolloutRound& round, int64_t policy_version) {
  Communicator& world = *topo_.world;
  nlohmann::json tokens = nlohmann::json::array(), ids = nlohmann::json::array();
  for (const auto& g : round.kept) {
    tokens.push_back(g.response_tokens());
    ids.push_back(g.id);
  }
  nlohmann::json discarded = nlohmann::json::array();
  for (const auto& g : round.discarded) discarded.push_back(to_json(g));
  world.send_bytes(pack_message({{"tokens", tokens},
                                 {"ids", ids},
                                 {"restarted", round.restarted},
                                 {"discarded", discarded},
                                 {"generate_seconds", round.generate_seconds},
                                 {"reward_seconds", round.reward_seconds},
                                 {"version", policy_version}}),
                    0, kManifest);
  trace::Span wait("deliver_wait");  // until trainer rank 0 collects the round
  const auto to = unpack_message(world.recv_bytes(0, kAssignment), "assignment").get<std::vector<int>>();
  RLCPP_CHECK(to.size() == round.kept.size(), "an assignment of {} groups for {} kept", to.size(), round.kept.size());
  std::vector<std::vector<SampleGroup>> share(static_cast<size_t>(T_));
  for (size_t g = 0; g < to.size(); ++g) share.at(static_cast<size_t>(to[g])).push_back(std::move(round.kept[g]));
  for (int t = 0; t < T_; ++t) world.send_bytes(encode_groups(share[static_cast<size_t>(t)]), topo_.replica_leader(t), kGroups);
}

RoundReceipt RolloutChannel::collect(std::deque<SampleGroup>& buffer) {
  RoundReceipt receipt;
  Communicator& world = *topo_.world;
  Communicator& replicas = *topo_.dp_group;  // on the replicas' first ranks: one per replica, in order
  // What every replica already holds, for the balance.
  std::vector<double> held(static_cast<size_t>(2 * T_), 0.0);
  const int me = replicas.rank();
  held[static_cast<size_t>(me)] = static_cast<double>(buffer.size());
  for (const auto& g : buffer) held[static_cast<size_t>(T_ + me)] += static_cast<double>(g.response_tokens());
  if (T_ > 1) {
    auto t = torch::tensor(held, torch::kFloat64);
    replicas.all_reduce_sum(t);
    std::copy(t.data_ptr<double>(), t.data_ptr<double>() + t.numel(), held.begin());
  }
  if (me == 0) {
    std::vector<std::vector<int64_t>> tokens(static_cast<size_t>(I_));
    for (int w = 0; w < I_; ++w) {
      const auto m = unpack_message(world.recv_bytes(topo_.engine_leader(w), kManifest), "manifest");
      tokens[static_cast<size_t>(w)] = m.at("tokens").get<std::vector<int64_t>>();
      for (const auto& g : m.at("discarded")) receipt.discarded.push_back(group_from_json(g));
      for (const auto& id : m.at("ids")) receipt.delivered.push_back(id.get<int64_t>());
      receipt.restarted += m.at("restarted").get<int64_t>();
      receipt.generate_seconds = std::max(receipt.generate_seconds, m.at("generate_seconds").get<double>());
      receipt.reward_seconds = std::max(receipt.reward_seconds, m.at("reward_seconds").get<double>());
      receipt.kept_all += static_cast<int64_t>(tokens[static_cast<size_t>(w)].size());
      receipt.generated += static_cast<int64_t>(m.at("tokens").size() + m.at("discarded").size());
    }
    // One balance over the whole round, then each worker learns where its groups go.
    std::vector<int64_t> all_tokens, held_groups, held_tokens;
    for (const auto& list : tokens) all_tokens.insert(all_tokens.end(), list.begin(), list.end());
    for (int t = 0; t < T_; ++t) {
      held_groups.push_back(static_cast<int64_t>(held[static_cast<size_t>(t)]));
      held_tokens.push_back(static_cast<int64_t>(held[static_cast<size_t>(T_ + t)]));
    }
    const auto to = assign_groups(all_tokens, held_groups, held_tokens);
    size_t offset = 0;
    for (int w = 0; w < I_; ++w) {
      const size_t n = tokens[static_cast<size_t>(w)].size();
      const std::vector<int> part(to.begin() + static_cast<long>(offset), to.begin() + static_cast<long>(offset + n));
      world.send_bytes(pack_message(part), topo_.engine_leader(w), kAssignment);
      offset += n;
    }
  }
  for (int w = 0; w < I_; ++w) {
    for (auto& g : decode_groups(world.recv_bytes(topo_.engine_leader(w), kGroups))) {
      buffer.push_back(std::move(g));
      ++receipt.kept;
    }
  }
  return receipt;
}

}  // namespace rlcpp
