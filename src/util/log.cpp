#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace rlcpp {

void init_logging() {
  auto logger = spdlog::stderr_color_mt("rlcpp");
  logger->set_pattern("%^[%H:%M:%S %L]%$ %v");
  spdlog::set_default_logger(logger);
  const char* level = std::getenv("RLCPP_LOG_LEVEL");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
}

}  // namespace rlcpp
