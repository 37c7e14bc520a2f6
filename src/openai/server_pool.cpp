#include "openai/server_pool.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <exception>
#include <sstream>
#include <thread>

#include "util/error.h"
#include "util/failpoint.h"

namespace rlcpp {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::string reply_message(const HttpReply& r) {
  if (r.status < 0) return r.error;
  const Json j = Json::parse(r.body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message")) {
      return j["error"]["message"].is_string() ? j["error"]["message"].get<std::string>() : j["error"]["message"].dump();
    }
    if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
    if (j.contains("detail")) return j["detail"].is_string() ? j["detail"].get<std::string>() : j["detail"].dump();
  }
  return r.body.substr(0, 300);
}

std::vector<std::string> split_urls(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto begin = item.find_first_not_of(" \t"), end = item.find_last_not_of(" \t");
    if (begin != std::string::npos) out.push_back(item.substr(begin, end - begin + 1));
  }
  return out;
}

std::string server_base_url(const std::string& given, const std::string& flag) {
  std::string url = given;
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  if (url.rfind("https://", 0) == 0) {
    throw_user_error("{} {}: https is not supported; reach the server over http (a private network, or an ssh tunnel)",
                     flag, given);
  }
  if (url.rfind("http://", 0) != 0) url = "http://" + url;
  const std::string rest = url.substr(7);
  const auto colon = rest.rfind(':');
  if (rest.empty() || rest.find('/') != std::string::npos || colon == std::string::npos || colon + 1 == rest.size() ||
      rest.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    throw_user_error("{} {}: expected http://HOST:PORT (optionally ending in /v1)", flag, given);
  }
  return url;
}

void for_each_request(size_t n, size_t threads, const std::function<void(size_t, const std::atomic<bool>&)>& fn) {
  std::atomic<bool> abort{false};
  std::mutex m;
  std::deque<size_t> todo;
  for (size_t k = 0; k < n; ++k) todo.push_back(k);
  std::exception_ptr error;
  auto work = [&] {
    for (;;) {
      size_t k;
      {
        std::lock_guard<std::mutex> lock(m);
        if (todo.empty() || abort) return;
        k = todo.front();
        todo.pop_front();
      }
      try {
        fn(k, abort);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        abort = true;
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 0; t < std::min(n, std::max<size_t>(1, threads)); ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

ServerPool::ServerPool(ServerPoolOptions options) : options_(std::move(options)) {
  if (options_.urls.empty()) throw_user_error("{}: give at least one server (http://HOST:PORT[,...])", options_.flag);
  if (options_.max_in_flight < 1) throw_user_error("{}: at least 1 request in flight per server", options_.flag);
  for (const auto& given : options_.urls) {
    Server server;
    server.url = server_base_url(given, options_.flag);
    for (const auto& other : servers_) {
      if (other.url == server.url) throw_user_error("{}: {} is given twice", options_.flag, given);
    }
    servers_.push_back(std::move(server));
  }
}

HttpReply ServerPool::exchange(size_t server, const std::string& method, const std::string& path, const std::string& body,
                               double timeout_s) const {
  httplib::Client client(url(server));
  client.set_connection_timeout(5, 0);
  const auto t = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(timeout_s));
  client.set_read_timeout(t);
  client.set_write_timeout(t);
  httplib::Headers headers;
  if (!options_.api_key.empty()) headers.emplace("Authorization", "Bearer " + options_.api_key);
  failpoint("http");  // the client side of a request (the trainer of the remote backend)
  auto result = method == "GET" ? client.Get(path.c_str(), headers) : client.Post(path.c_str(), headers, body, "application/json");
  HttpReply r;
  if (!result) {
    r.error = httplib::to_string(result.error());
    return r;
  }
  r.status = result->status;
  r.body = result->body;
  return r;
}

size_t ServerPool::acquire(const std::atomic<bool>& abort) {
  std::unique_lock<std::mutex> lock(m_);
  for (;;) {
    if (abort) throw_user_error("requests to the {}s stopped after another one failed", options_.what);
    size_t best = servers_.size();
    bool any_up = false;
    const auto now = Clock::now();
    for (size_t k = 0; k < servers_.size(); ++k) {
      const Server& s = servers_[k];
      if (now < s.down_until) continue;
      any_up = true;
      if (s.in_flight >= options_.max_in_flight) continue;
      if (best == servers_.size() || s.in_flight < servers_[best].in_flight) best = k;
    }
    if (best < servers_.size()) {
      ++servers_[best].in_flight;
      return best;
    }
    if (!any_up && seconds_since(last_answer_) > options_.unavailable_timeout_s) {
      std::string urls;
      for (const auto& s : servers_) urls += (urls.empty() ? "" : ", ") + s.url;
      throw_user_error("no {} has answered for {:.0f} s ({}): start them again, or check {}", options_.what,
                       seconds_since(last_answer_), urls, options_.flag);
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

void ServerPool::release(size_t server) {
  std::lock_guard<std::mutex> lock(m_);
  --servers_.at(server).in_flight;
  cv_.notify_all();
}

void ServerPool::mark_down(size_t server, const std::string& why) {
  std::lock_guard<std::mutex> lock(m_);
  Server& s = servers_.at(server);
  s.down_until = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(s.backoff_s * 1e6));
  if (!s.down) spdlog::warn("{} {} failed ({}); its requests go to the others, retried in {:.1f} s", options_.what, s.url, why, s.backoff_s);
  s.down = true;
  s.backoff_s = std::min(10.0, s.backoff_s * 2);
  ++failures_;
  cv_.notify_all();
}

void ServerPool::mark_up(size_t server) {
  std::lock_guard<std::mutex> lock(m_);
  Server& s = servers_.at(server);
  if (s.down) spdlog::info("{} {} answers again", options_.what, s.url);
  s.down = false;
  s.backoff_s = 0.5;
  last_answer_ = Clock::now();
}

void ServerPool::restart_clock() {
  std::lock_guard<std::mutex> lock(m_);
  last_answer_ = Clock::now();
}

int64_t ServerPool::failures() const {
  std::lock_guard<std::mutex> lock(m_);
  return failures_;
}

}  // namespace rlcpp
