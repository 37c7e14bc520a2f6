// Reward ranks of their own (--reward-ranks R, OpenRLHF's separate reward-model actors): under
// mpirun -np T+I+R the last R ranks hold the reward model and score what the rollout engines send
// them, so the engines hold no copy of it. Engine e is served by reward rank e mod R. An engine's
// first rank sends each batch of token rows as its own ModelReward would score them, and the
// reward rank scores them exactly so (RewardModelScorer), so the scores are the same numbers as
// when the engine loads the model itself. The reward ranks hold no run state: a run resumes with
// any R, or none.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/topology.h"
#include "rl/config/run_config.h"

namespace rlcpp {

// Runs a reward rank until every engine it serves (and trainer rank 0, for its evaluations) has
// stopped.
void run_reward_rank(const RunConfig& config, const Topology& topology);

// Whether trainer rank 0 scores its evaluations with the reward model on the first reward rank,
// rather than loading the model itself: there are reward ranks, eval sets and a reward model, and
// evaluation reports the mean reward (the reward does not grade answers).
bool evaluation_on_reward_rank(const RunConfig& config, const Topology& topology);

// On an engine's first rank (or trainer rank 0, evaluation_on_reward_rank): its reward rank's
// scores of token rows (ModelReward's RowScorer), and at the end the stop that rank waits for.
// MPI is called on the thread that made the client only (MPI_THREAD_FUNNELED): rows scored on
// another thread (a round graded while the worker takes weights) wait there until that thread's
// pump() sends them and hands back the scores.
class RewardRankClient {
 public:
  // Served by reward rank `server` (a world rank).
  RewardRankClient(const Topology& topology, int server);
  std::vector<double> score(const std::vector<std::vector<int32_t>>& rows);
  // On the client's thread, again and again while another thread scores: serves its rows if posted.
  void pump();
  void stop();

 private:
  std::vector<double> exchange(const std::vector<std::vector<int32_t>>& rows);

  const Topology& topo_;
  int server_;  // its world rank
  std::thread::id owner_;
  std::mutex posting_;  // other threads post one request at a time
  std::mutex mutex_;
  std::condition_variable done_;
  const std::vector<std::vector<int32_t>>* posted_ = nullptr;
  std::optional<std::vector<double>> reply_;
  std::exception_ptr error_;
};

// The messages between them: token rows, or a stop (no rows); and the scores back.
std::string encode_reward_request(const std::vector<std::vector<int32_t>>* rows);
// The rows, or nullopt for a stop; a malformed message is an InternalError.
std::optional<std::vector<std::vector<int32_t>>> decode_reward_request(const std::string& bytes);
std::string encode_scores(const std::vector<double>& scores);
std::vector<double> decode_scores(const std::string& bytes, size_t expected);

}  // namespace rlcpp
