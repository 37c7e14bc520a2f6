// A pool of OpenAI-compatible servers (rlcpp serve, vLLM, SGLang) for requests that any of them may
// answer: the rollout backend's completions and the LLM judge's chat completions. Each request goes
// to the server with the fewest in flight among those not set aside and below the per-server
// limit; a server that fails (refused, reset, timed out, 5xx) is set aside for a pause that doubles
// from 0.5 s up to 10 s and its request goes to another; once no server has answered for
// unavailable_timeout_s, acquiring one is a UserError naming them all.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace rlcpp {

// An HTTP exchange's outcome: status -1 when no answer came (refused, reset, timed out).
struct HttpReply {
  int status = -1;
  std::string body;
  std::string error;  // the transport's error when status is -1
};

// A message for logs and errors from an answer: OpenAI's error.message, else the body's start.
std::string reply_message(const HttpReply& reply);

// "URL,URL,...": the URLs, blanks around each dropped, empty items skipped.
std::vector<std::string> split_urls(const std::string& text);

// "http://host:port[/v1]" (or "host:port") as "http://host:port"; anything else (https, a path) is
// a UserError naming `flag`.
std::string server_base_url(const std::string& given, const std::string& flag);

// Runs fn(k, abort) for k in [0, n) on up to `threads` threads; the first exception stops the others
// (abort is set: a request in progress may end early) and is rethrown.
void for_each_request(size_t n, size_t threads, const std::function<void(size_t, const std::atomic<bool>& abort)>& fn);

struct ServerPoolOptions {
  std::vector<std::string> urls;       // base URLs (server_base_url)
  std::string api_key;                 // sent as "Authorization: Bearer KEY" ("": none)
  int64_t max_in_flight = 32;          // requests at one server
  double unavailable_timeout_s = 300;  // acquire fails once no server has answered for this long
  std::string what = "server";         // how logs and errors name a server ("rollout server", "judge server")
  std::string flag = "--url";          // the flag the URLs came from, for errors
};

class ServerPool {
 public:
  explicit ServerPool(ServerPoolOptions options);

  size_t size() const { return servers_.size(); }
  const std::string& url(size_t server) const { return servers_.at(server).url; }
  const ServerPoolOptions& options() const { return options_; }

  // One exchange with a server (GET, or POST of a JSON body), with `timeout_s` to connect-and-answer.
  HttpReply exchange(size_t server, const std::string& method, const std::string& path, const std::string& body,
                     double timeout_s) const;
  // The least loaded server that is up, counted in flight until release; waits for one. A UserError
  // once `abort` is set or no server has answered for unavailable_timeout_s.
  size_t acquire(const std::atomic<bool>& abort);
  void release(size_t server);
  // A failure: the server is set aside (a warning the first time); an answer: it is back.
  void mark_down(size_t server, const std::string& why);
  void mark_up(size_t server);
  int64_t failures() const;  // mark_down calls so far
  // The unavailable timeout counts from now (a new batch of requests begins).
  void restart_clock();

 private:
  struct Server {
    std::string url;
    int64_t in_flight = 0;
    std::chrono::steady_clock::time_point down_until{};
    double backoff_s = 0.5;
    bool down = false;
  };
  ServerPoolOptions options_;
  std::vector<Server> servers_;  // under m_
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::chrono::steady_clock::time_point last_answer_ = std::chrono::steady_clock::now();
  int64_t failures_ = 0;
};

}  // namespace rlcpp
