#include "util/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>

#include "util/progress.h"

namespace rlcpp {

namespace {

// Log lines above the progress line: erase it, print, draw it again.
class ProgressAwareSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  ProgressAwareSink() : inner_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    progress::clear();
    inner_->log(msg);
    progress::redraw();
  }
  void flush_() override { inner_->flush(); }
  void set_pattern_(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter_(std::unique_ptr<spdlog::formatter> formatter) override { inner_->set_formatter(std::move(formatter)); }

 private:
  std::shared_ptr<spdlog::sinks::stderr_color_sink_mt> inner_;
};

}  // namespace

void init_logging() {
  auto logger = progress::enabled() ? std::make_shared<spdlog::logger>("rlcpp", std::make_shared<ProgressAwareSink>())
                                    : spdlog::stderr_color_mt("rlcpp");
  logger->set_pattern("%^[%H:%M:%S %L]%$ %v");
  spdlog::set_default_logger(logger);
  const char* level = std::getenv("RLCPP_LOG_LEVEL");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
}

}  // namespace rlcpp
