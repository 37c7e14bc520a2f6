#include "rl/modes/reward_rank.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "rl/modes/control.h"
#include "reward/reward_function.h"
#include "rl/rollout/model_reward.h"
#include "util/error.h"
#include "util/trace.h"

namespace rlcpp {

namespace {

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Reads a T at `at`, advancing it; past the end is an InternalError naming the message.
template <typename T>
T take(const std::string& bytes, size_t& at, const char* what) {
  RLCPP_CHECK(at + sizeof(T) <= bytes.size(), "a reward-rank {} of {} bytes ends early", what, bytes.size());
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  at += sizeof(T);
  return value;
}

}  // namespace

std::string encode_reward_request(const std::vector<std::vector<int32_t>>* rows) {
  std::string out;
  put<uint8_t>(out, rows != nullptr ? 'R' : 'S');
  if (rows == nullptr) return out;
  put<uint64_t>(out, rows->size());
  for (const auto& row : *rows) put<uint64_t>(out, row.size());
  for (const auto& row : *rows) out.append(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(int32_t));
  return out;
}

std::optional<std::vector<std::vector<int32_t>>> decode_reward_request(const std::string& bytes) {
  size_t at = 0;
  const auto kind = take<uint8_t>(bytes, at, "request");
  RLCPP_CHECK(kind == 'R' || kind == 'S', "a reward-rank request of unknown kind {}", static_cast<int>(kind));
  if (kind == 'S') return std::nullopt;
  const auto n = take<uint64_t>(bytes, at, "request");
  RLCPP_CHECK(n <= bytes.size(), "a reward-rank request of {} rows in {} bytes", n, bytes.size());
  std::vector<std::vector<int32_t>> rows(n);
  for (auto& row : rows) row.resize(take<uint64_t>(bytes, at, "request"));
  for (auto& row : rows) {
    const size_t size = row.size() * sizeof(int32_t);
    RLCPP_CHECK(at + size <= bytes.size(), "a reward-rank request of {} bytes ends early", bytes.size());
    std::memcpy(row.data(), bytes.data() + at, size);
    at += size;
  }
  RLCPP_CHECK(at == bytes.size(), "a reward-rank request with {} bytes left over", bytes.size() - at);
  return rows;
}

std::string encode_scores(const std::vector<double>& scores) {
  return std::string(reinterpret_cast<const char*>(scores.data()), scores.size() * sizeof(double));
}

std::vector<double> decode_scores(const std::string& bytes, size_t expected) {
  RLCPP_CHECK(bytes.size() == expected * sizeof(double), "{} bytes of scores from a reward rank for {} rows", bytes.size(),
              expected);
  std::vector<double> out(expected);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

RewardRankClient::RewardRankClient(const Topology& topology, int server)
    : topo_(topology), server_(server), owner_(std::this_thread::get_id()) {}

std::vector<double> RewardRankClient::exchange(const std::vector<std::vector<int32_t>>& rows) {
  trace::Span span("reward_rank");
  topo_.world->send_bytes(encode_reward_request(&rows), server_, kRewardTag);
  return decode_scores(topo_.world->recv_bytes(server_, kRewardTag), rows.size());
}

std::vector<double> RewardRankClient::score(const std::vector<std::vector<int32_t>>& rows) {
  if (std::this_thread::get_id() == owner_) return exchange(rows);
  std::lock_guard one_at_a_time(posting_);
  std::unique_lock lock(mutex_);
  posted_ = &rows;
  done_.wait(lock, [&] { return reply_.has_value() || error_ != nullptr; });
  posted_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return std::exchange(reply_, std::nullopt).value();
}

void RewardRankClient::pump() {
  const std::vector<std::vector<int32_t>>* rows = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (posted_ == nullptr || reply_ || error_) return;
    rows = posted_;
  }
  std::optional<std::vector<double>> scores;
  std::exception_ptr error;
  try {
    scores = exchange(*rows);
  } catch (...) {
    error = std::current_exception();  // the scoring thread rethrows it (its caller waits for that thread)
  }
  {
    std::lock_guard lock(mutex_);
    reply_ = std::move(scores);
    error_ = error;
  }
  done_.notify_all();
}

void RewardRankClient::stop() { topo_.world->send_bytes(encode_reward_request(nullptr), server_, kRewardTag); }

bool evaluation_on_reward_rank(const RunConfig& c, const Topology& topo) {
  return topo.num_reward > 0 && !c.reward.model.path.empty() && !grades_answers(c.reward) && !eval_sets(c.eval).empty();
}

void run_reward_rank(const RunConfig& c, const Topology& topo) {
  RewardModelScorer scorer(c.reward.model, c.runtime.device, c.runtime.dtype);
  std::vector<int> clients;  // the world ranks this rank serves: engines' first ranks, trainer rank 0
  for (int e = 0; e < topo.num_engines(); ++e) {
    if (topo.reward_rank_of(e) == topo.world->rank()) clients.push_back(topo.engine_leader(e));
  }
  const bool evaluations = evaluation_on_reward_rank(c, topo) && topo.world->rank() == topo.reward_rank_of(0);
  if (evaluations) clients.push_back(0);
  spdlog::info("{} scoring with the reward model {} for {} engine(s){}", topo.describe(), c.reward.model.path,
               clients.size() - (evaluations ? 1 : 0), evaluations ? " and trainer 0's evaluations" : "");
  size_t running = clients.size();
  std::vector<bool> stopped(clients.size(), false);
  while (running > 0) {
    bool served = false;
    for (size_t k = 0; k < clients.size(); ++k) {
      if (stopped[k] || !topo.world->probe(clients[k], kRewardTag)) continue;
      served = true;
      const auto rows = decode_reward_request(topo.world->recv_bytes(clients[k], kRewardTag));
      if (!rows) {
        stopped[k] = true;
        --running;
        continue;
      }
      trace::Span span("score");
      topo.world->send_bytes(encode_scores(scorer.score(*rows)), clients[k], kRewardTag);
    }
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  trace::write();
}

}  // namespace rlcpp
