// `rlcpp serve`'s connections (openai/server.h): cpp-httplib's task queue, replaced so that a slow
// or idle client cannot hold the server: each connection gets its own thread at once, up to
// --max-connections (more are refused with 503), and one that sends no whole request within
// --request-timeout is closed. Only openai/server.cpp includes it.
#pragma once

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "openai/protocol.h"

namespace rlcpp {

// The server's connections, each served by a thread of its own from its accept (none waits in a
// queue behind a slow one). cpp-httplib hands a connection over without its socket, so the table
// finds it: accept() and enqueue() run one after the other on the listening thread, and the new
// connection is the socket on the server's port that the table does not know yet (told apart by
// inode, which the kernel does not reuse as it reuses descriptors). A connection that has not sent
// a whole request `request_timeout` seconds after its accept or its last answer is shut down, so
// an idle or byte-at-a-time client holds a thread for that long at most; one past `max_open` is
// answered 503 once its request is read, and past twice that shut down at once.
class Connections : public httplib::TaskQueue {
 public:
  // Of the server listening on `port` with socket `listen_fd`.
  Connections(int max_open, double request_timeout, int port, int listen_fd)
      : max_open_(max_open), timeout_(request_timeout), port_(port), listen_fd_(listen_fd) {
    reaper_ = std::thread([this] { reap(); });
  }
  ~Connections() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::vector<Conn> found = unknown_sockets();
    std::unique_lock<std::mutex> lock(m_);
    // Past the cap a connection still gets a thread, to read its request and answer 503 (a client
    // sees the answer, not a reset), up to as many again; past that its socket is shut down at once.
    const bool over = open_ >= static_cast<size_t>(max_open_);
    const bool flood = over && refusing_ >= static_cast<size_t>(max_open_);
    std::vector<ino_t> mine;
    for (auto& c : found) {
      c.refused = over;
      mine.push_back(c.inode);
      conns_.emplace(c.inode, std::move(c));
    }
    if (over) ++refused_;
    if (flood) {
      for (ino_t inode : mine) refuse(conns_.at(inode));
      lock.unlock();
      fn();  // its reads end at once: the socket is shut down
      lock.lock();
      for (ino_t inode : mine) conns_.erase(inode);
      return;
    }
    ++(over ? refusing_ : open_);
    auto counted_over = std::make_shared<bool>(over);  // a refused one let in once its request is read
    for (ino_t inode : mine) conns_.at(inode).counted_over = counted_over;
    std::thread([this, fn = std::move(fn), mine, counted_over] {
      fn();
      std::lock_guard<std::mutex> done(m_);
      for (ino_t inode : mine) conns_.erase(inode);
      --(*counted_over ? refusing_ : open_);
      cv_.notify_all();
    }).detach();
  }

  void shutdown() override {
    std::unique_lock<std::mutex> lock(m_);
    stopping_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_ == 0 && refusing_ == 0; });
    lock.unlock();
    if (reaper_.joinable()) reaper_.join();
  }

  // A request of the connection from `addr`:`port` reached its handler (its clock stops) or was
  // answered (its clock starts again: the next request has `request_timeout` to arrive).
  void handling(const std::string& addr, int port, bool on) {
    std::lock_guard<std::mutex> lock(m_);
    for (auto& [inode, c] : conns_) {
      if (c.peer_port != port || c.peer_addr != addr) continue;
      c.busy = on;
      c.since = std::chrono::steady_clock::now();
    }
  }
  // Closes the connection once its answer is written (cpp-httplib keeps a connection open after
  // an answer saying "Connection: close").
  void close(const std::string& addr, int port) {
    std::lock_guard<std::mutex> lock(m_);
    for (auto& [inode, c] : conns_) {
      if (c.peer_port == port && c.peer_addr == addr) cut(c);
    }
  }
  // Whether the connection's request is answered 503. One accepted past the cap is let in when a
  // place comes free by its request's read or within a second after: a client's connection closing
  // after its last answer (cpp-httplib closes every fifth) was still counted when its next arrived.
  bool refused(const std::string& addr, int port) {
    std::unique_lock<std::mutex> lock(m_);
    auto find = [&]() -> Conn* {
      for (auto& [inode, c] : conns_) {
        if (c.peer_port == port && c.peer_addr == addr) return &c;
      }
      return nullptr;
    };
    Conn* c = find();
    if (c == nullptr || !c->refused) return false;
    // A burst just past the cap waits up to a second for a place rather than failing at once.
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return open_ < static_cast<size_t>(max_open_) || stopping_; });
    c = find();  // the table may have changed while waiting
    if (c == nullptr) return true;
    if (c->refused && c->counted_over && *c->counted_over && open_ < static_cast<size_t>(max_open_)) {
      c->refused = false;
      *c->counted_over = false;
      --refusing_;
      ++open_;
      --refused_;
    }
    return c->refused;
  }

  struct Counts {
    int64_t open = 0, refused = 0, timed_out = 0;
  };
  Counts counts() {
    std::lock_guard<std::mutex> lock(m_);
    return {static_cast<int64_t>(open_), refused_, timed_out_};
  }

 private:
  struct Conn {
    int fd = -1;
    ino_t inode = 0;
    std::string peer_addr;
    int peer_port = 0;
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    bool busy = false, refused = false, cut = false;
    std::shared_ptr<bool> counted_over;  // counted among those past the cap (else among the open ones)
  };

  // Sockets of connections to the server's port not in the table (normally the one just accepted).
  std::vector<Conn> unknown_sockets() {
    std::vector<Conn> out;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      int fd = -1;
      try {
        fd = std::stoi(entry.path().filename().string());
      } catch (const std::exception&) {
        continue;
      }
      struct stat st {};
      if (fd == listen_fd_ || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      {
        std::lock_guard<std::mutex> lock(m_);
        if (conns_.count(st.st_ino) != 0) continue;
      }
      sockaddr_storage local{}, peer{};
      socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
          ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
        continue;
      }
      char local_port[NI_MAXSERV], host[NI_MAXHOST], peer_port[NI_MAXSERV];
      if (::getnameinfo(reinterpret_cast<sockaddr*>(&local), local_len, nullptr, 0, local_port, sizeof(local_port),
                        NI_NUMERICSERV) != 0 ||
          std::atoi(local_port) != port_ ||
          ::getnameinfo(reinterpret_cast<sockaddr*>(&peer), peer_len, host, sizeof(host), peer_port, sizeof(peer_port),
                        NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        continue;
      }
      Conn c;
      c.fd = fd;
      c.inode = st.st_ino;
      c.peer_addr = host;
      c.peer_port = std::atoi(peer_port);
      out.push_back(std::move(c));
    }
    return out;
  }

  // Shuts `c`'s socket down if it is still the one the table knows (its descriptor may be reused).
  static bool cut(Conn& c) {
    struct stat st {};
    if (c.cut || ::fstat(c.fd, &st) != 0 || st.st_ino != c.inode) return false;
    ::shutdown(c.fd, SHUT_RDWR);
    c.cut = true;
    return true;
  }

  void refuse(Conn& c) {
    const std::string body = ApiError(503, fmt::format("the server has {} connections open, its most "
                                                       "(--max-connections); try again later", max_open_)).body();
    const std::string reply = fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                          "Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{}",
                                          body.size(), body);
    [[maybe_unused]] const auto sent = ::send(c.fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    cut(c);
  }

  void reap() {
    std::unique_lock<std::mutex> lock(m_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      const auto now = std::chrono::steady_clock::now();
      for (auto& [inode, c] : conns_) {
        if (c.busy || std::chrono::duration<double>(now - c.since).count() < timeout_) continue;
        if (cut(c)) {
          ++timed_out_;
          spdlog::debug("rlcpp serve: {}:{} sent no whole request in {} s (--request-timeout): closed", c.peer_addr,
                        c.peer_port, timeout_);
        }
      }
    }
  }

  const int max_open_;
  const double timeout_;
  std::mutex m_;
  std::condition_variable cv_;
  std::map<ino_t, Conn> conns_;
  size_t open_ = 0, refusing_ = 0;  // connections served, and those past the cap being answered 503
  int64_t refused_ = 0, timed_out_ = 0;
  const int port_, listen_fd_;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace rlcpp
