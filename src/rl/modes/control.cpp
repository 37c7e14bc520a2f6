#include "rl/modes/control.h"

#include <fmt/format.h>

#include "rl/rollout/rollout_channel.h"
#include "util/error.h"

namespace rlcpp {

std::string encode_control(const ControlMessage& m) {
  nlohmann::json picks = nlohmann::json::array(), next = nlohmann::json::array();
  for (const auto& p : m.picks) picks.push_back(to_json(p));
  for (const auto& p : m.next) next.push_back(to_json(p));
  return pack_message({{"op", static_cast<int>(m.op)},
                       {"verify", m.verify},
                       {"picks", picks},
                       {"next", next},
                       {"switches", to_json(m.switches)},
                       {"in_flight", m.in_flight}});
}

ControlMessage decode_control(const std::string& bytes) {
  const auto j = unpack_message(bytes, "control");
  ControlMessage m;
  try {
    const int op = j.at("op").get<int>();
    RLCPP_CHECK(op >= static_cast<int>(ControlMessage::Op::kSync) && op <= static_cast<int>(ControlMessage::Op::kResume),
                "unknown control op {} from trainer rank 0", op);
    m.op = static_cast<ControlMessage::Op>(op);
    m.verify = j.at("verify").get<bool>();
    for (const auto& p : j.at("picks")) m.picks.push_back(pick_from_json(p));
    for (const auto& p : j.value("next", nlohmann::json::array())) m.next.push_back(pick_from_json(p));
    m.switches = switches_from_json(j.at("switches"));
    m.in_flight = j.value("in_flight", nlohmann::json(nullptr));
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
