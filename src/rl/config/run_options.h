// The option groups of a run that belong to rl/ itself (the others live with their layers:
// RemoteOptions in openai/, RewardOptions in reward/, AlgoConfig in algo/, TrainOptions in train/,
// EngineConfig in engine/). Each is one YAML group of the run file; RunConfig holds them all.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "engine/sampling.h"
#include "model/lora.h"
#include "parallel/weight_sync.h"
#include "train/pipeline.h"
#include "text/prompt_builder.h"

namespace rlcpp {

// runtime: the data, how long, the seed, where the weights live, and resuming.
struct RuntimeOptions {
  std::string dataset;                 // training JSONL
  int64_t num_episodes = 1;            // passes over the dataset
  int64_t max_steps = 0;               // stop after this many steps (0: the episodes decide)
  uint64_t seed = 42;                  // data order, sampling and initialisation
  std::string device = "cpu";          // cpu | cuda | cuda:N
  std::string dtype = "float32";       // weights and compute (a name of dtypes())
  std::string resume;                  // "" (fresh run unless -cp), "auto": the newest checkpoint of the run
  std::string checkpoint_path;         // a step-N directory or a run directory to resume from
  bool enable_resume_training = true;  // ChatLearn: resume when a checkpoint path is set
  int64_t resume_step = 0;             // resume from step-N of -cp's run (ChatLearn's load_data_checkpoint_iteration; 0: latest)
  int64_t consumed_samples = 0;        // a fresh run first skips this many prompts of the data order (ChatLearn)
  bool skip_bad_lines = false;         // malformed dataset lines are counted and skipped, not an error
};

// parallel: the processes of a run, how the trainers split the model, and how weights reach the
// rollout workers.
struct ParallelOptions {
  int64_t num_trainers = 0;            // data-parallel trainer ranks (0: 1)
  int64_t num_inferencers = 0;         // rollout-worker ranks; >= 1 is the distributed mode
  int64_t tp = 1;                      // trainer tensor parallelism: ranks per data-parallel replica
  int64_t pp = 1;                      // pipeline stages of each trainer replica
  StageBalance pp_balance = StageBalance::kWork;  // what the stages' layers are balanced by
  int64_t zero = 0;                    // ZeRO stage
  int64_t ptp = 1;                     // rollout tensor parallelism: ranks per engine
  int64_t reward_ranks = 0;            // ranks [T+I, T+I+R) holding the reward model (engine e's: e mod R); 0: none
  int64_t sync_bucket_mb = 100;        // weight-sync buckets (ChatLearn's coalesced_buffer_mb)
  SyncMode param_sync_comm_type = SyncMode::kBroadcast;  // how trainer rank 0 sends weights to the workers
  bool verify_sync = false;            // rollout workers send back a hash of the weights they applied
  double comm_timeout = 1800;          // seconds a blocking MPI operation may wait before the job ends (0: for ever)
  std::string master_address;          // the reference's rendezvous (refused: mpirun provides it)
  int64_t master_port = 0;             // likewise

  bool distributed() const { return num_inferencers >= 1; }
  int64_t trainers() const { return std::max<int64_t>(1, num_trainers); }
  int64_t inferencers() const { return std::max<int64_t>(1, num_inferencers); }
  int64_t replicas() const { return std::max<int64_t>(1, trainers() / (tp * pp)); }  // data-parallel trainer replicas
  int64_t engines() const { return distributed() ? std::max<int64_t>(1, inferencers() / ptp) : 1; }
};

// staleness: how far the policy that generates may lag the one that trains.
struct StalenessOptions {
  int64_t n_behind = 0;                // rounds rollout may run ahead of training (bounded staleness)
  int64_t sync_frequency = 1;          // rollout rounds between weight syncs
  int64_t max_relay_episode = 0;       // relay buffer: steps whose rollouts are trained on again (-1: all, 0: off)
  int64_t relay_episode_offset = 0;    // relayed rollouts join the steps from this step on
  // A sample is trained at most this many policy versions after the oldest policy that sampled any
  // of its tokens (AReaL's max_head_offpolicyness); -1: no bound. What goes over it (stale_finish):
  // false ("drop"), groups are dropped and counted, and a partial rollout's round ahead starts at the
  // first version the bound allows; true ("finish"), the round starts at once and tokens sampled
  // more versions back stay as context, not trained (counted; a group left with none is dropped).
  int64_t max_staleness = -1;
  bool stale_finish = false;
  // Partial rollouts (ChatLearn's use_partial_rollout): a round generated ahead of training (-nb 1)
  // takes each policy version the trainers make meanwhile in the middle of its sequences, at engine
  // steps the schedule names (every switch_interval steps; 0: -mnt per generate call, over
  // versions + 1), so a run is reproducible; with switch_asap, as soon as the weights arrive.
  bool partial_rollout = false;
  int64_t switch_interval = 0;
  bool switch_asap = false;
  bool recompute_kv = false;  // a sequence's cached keys and values recomputed on the new weights (else kept)
  // Partial rollouts over rollout workers (or servers, single-turn): a checkpoint cuts the round
  // ahead at the checkpoint's version and saves it in flight, the round going on from its sequences
  // (true, "cut"); else the trainers collect the round whole before they save it ("collect").
  bool cut_at_checkpoint = true;
  // Partial rollouts over rollout workers: each round is sent with the next one's prompts, which
  // the engine decodes in the slots the round leaves free; the next round goes on from them.
  bool stream_prompts = false;
  // With stream_prompts ("completion"): a worker's round ends once -ibs of the groups it holds (its
  // own and those streamed) are complete, and delivers those (the oldest prompts first); the others
  // go on in the next round, so the trainers never wait for a round's slowest group. Else ("pick")
  // a round delivers its own prompts' groups.
  bool completion_order = false;
};

// model: the model trained.
struct PolicyOptions {
  std::string path;                    // Hugging Face model directory
  LoraConfig lora;                     // LoRA adapters (rank 0: all weights are trained)
  std::optional<bool> enable_lora;     // ChatLearn's switch: true gives rank 8 unless set, false turns LoRA off
  double lora_scaling = 0;             // ChatLearn's scaling (alpha = scaling x rank); 0: unset
  std::string frozen_dtype;            // frozen weights (LoRA's base, the reference) stored in this dtype ("": dtype)
};

// rollout: how samples are generated, from which prompts, in rounds of what size.
struct RolloutOptions {
  int64_t num_generations = 8;         // G, samples per prompt
  std::string dtype;                   // the engine's weights ("": the run's dtype; see EngineConfig::weights_dtype)
  std::string kv_cache_dtype;          // the engine's KV cache ("": its compute dtype)
  EngineConfig engine;                 // the engine's KV-cache budget and scheduler (the dtypes: the two above)
  int64_t inference_batch_size = 0;    // prompts per rollout round per rollout worker (0: train_batch_size)
  int64_t inference_microbatch_size = 0;  // prompts per generate call (0: the whole round)
  SamplingParams sampling;             // temperature, top-k/p, max_new_tokens
  int64_t max_prompt_tokens = 0;       // the prompt length limit (0: the model's positions less one)
  PromptOverflow overflow = PromptOverflow::kTruncateLeft;  // what a prompt over the limit gets
  std::optional<std::string> system_prompt;  // unset: the reward type's default
  bool ranking = false;                // generate each round's prompts shortest first
  int64_t min_prompt_length = 0;       // prompts with fewer tokens are skipped
};

// eval: held-out sets evaluated during training.
struct EvalOptions {
  std::string dataset;                 // {"name": "path.jsonl", ...}
  int64_t interval = -1;               // steps between evaluations (<= 0: at the end only)
  std::string save_dir;                // per-sample JSONL under DIR/<project>/<set>/ ("": the run directory's eval/)
  int64_t n = 1;                       // samples per eval prompt (pass@n)
  double temperature = 0.6;            // the reference system's eval sampling
  bool greedy = false;                 // temperature 0 for evaluation
  int64_t max_new_tokens = 0;          // 0: -mnt
  int64_t limit = 0;                   // first N prompts of each set (0: all)
};

// logging: where the run is written, checkpoints, rollout files, the console and profiles.
struct LoggingOptions {
  std::string project = "rlcpp";       // run name: the folder under save_dir
  std::string save_dir = "runs";       // where runs are written
  int64_t save_interval = 0;           // steps between checkpoints (0: only at the end)
  int64_t max_checkpoints = 0;         // keep only the newest N step directories (0: all)
  bool save_merged = false;            // LoRA: each checkpoint also holds the merged model under merged/
  std::string rollout_save_dir;        // rollouts JSONL (prompts, responses, rewards), "" = off
  int64_t rollout_save_interval = 1;   // steps between rollout files
  bool debug = false;                  // debug-level log lines (ChatLearn's debug)
  int64_t log_interval = 1;            // console line every N steps (metrics.jsonl: every step)
  std::string profile_dir;             // Chrome-trace JSON per rank under DIR/<project>/ ("" = off)
};

}  // namespace rlcpp
