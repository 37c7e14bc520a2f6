// Logging: spdlog to stderr with a short pattern; `RLCPP_LOG_LEVEL` (trace|debug|info|warn|error) sets the level.
#pragma once

#include <spdlog/spdlog.h>

namespace rlcpp {

void init_logging();

}  // namespace rlcpp
