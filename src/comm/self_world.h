// The world of a process started without a launcher: one rank, every collective the identity.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace rlcpp {

std::shared_ptr<Communicator> self_world();

}  // namespace rlcpp
