#include "rl/modes/control.h"

#include <fmt/format.h>

#include "rl/rollout/rollout_channel.h"
#include "util/error.h"

namespace rlcpp {

std::string encode_control(const ControlMessage& m) {
  nlohmann::json picks = nlohmann::json::array();
  for (const auto& p : m.picks) picks.push_back(to_json(p));
  return pack_message({{"op", static_cast<int>(m.op)},
                       {"verify", m.verify},
                       {"picks", picks},
                       {"switches", {{"during_round", m.switches.during_round}, {"asap", m.switches.asap},
                                     {"start_after", m.switches.start_after}, {"at", m.switches.at}}}});
}

ControlMessage decode_control(const std::string& bytes) {
  const auto j = unpack_message(bytes, "control");
  ControlMessage m;
  try {
    const int op = j.at("op").get<int>();
    RLCPP_CHECK(op >= static_cast<int>(ControlMessage::Op::kSync) && op <= static_cast<int>(ControlMessage::Op::kStop),
                "unknown control op {} from trainer rank 0", op);
    m.op = static_cast<ControlMessage::Op>(op);
    m.verify = j.at("verify").get<bool>();
    for (const auto& p : j.at("picks")) m.picks.push_back(pick_from_json(p));
    const auto& switches = j.at("switches");
    m.switches.during_round = switches.at("during_round").get<bool>();
    m.switches.asap = switches.at("asap").get<bool>();
    m.switches.start_after = switches.at("start_after").get<int64_t>();
    m.switches.at = switches.at("at").get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    throw InternalError(fmt::format("a malformed control message from trainer rank 0: {}", e.what()));
  }
  return m;
}

void send_control(Communicator& world, const ControlMessage& message, int dest) {
  world.send_bytes(encode_control(message), dest, kControlTag);
}

ControlMessage recv_control(Communicator& world) { return decode_control(world.recv_bytes(0, kControlTag)); }

}  // namespace rlcpp
