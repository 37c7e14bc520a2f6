// `rlcpp train`: GRPO/DAPO fine-tuning of a Hugging Face model on a JSONL dataset — colocated in
// one process, or distributed under mpirun (-t trainers, -i rollout workers). Every setting of the
// run table (rl/config/run_config.h) with flags is an option, with the reference system's short and long
// names; `--config run.yaml` gives them in a file.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "app/commands.h"
#include "app/run_flags.h"
#include "comm/mpi.h"
#include "parallel/topology.h"
#include "rl/config/chatlearn_fields.h"
#include "rl/modes/colocated.h"
#include "rl/modes/distributed.h"
#include "rl/run/memory_plan.h"
#include "util/error.h"
#include "util/threads.h"

namespace rlcpp {

namespace {

// The run's configuration and topology, checked on every rank before any work. A failure is
// reported once — by the lowest rank that failed — and every rank exits with code 2.
std::pair<RunConfig, std::optional<Topology>> prepare(const RawSettings& raw, const std::shared_ptr<Communicator>& world,
                                                      bool memory_check) {
  std::string error;
  RunConfig config;
  std::optional<Topology> topology;
  try {
    config = resolve_run_config(raw);
    if (memory_check && world->rank() == 0) {
      check_run_memory(config, estimate_run_memory(config), available_memory_bytes(config.runtime.device));
    }
    if (config.parallel.distributed()) {
      require_mpi(fmt::format("-t {} -i {}", config.parallel.trainers(), config.parallel.inferencers()));
      topology = Topology::create(world, static_cast<int>(config.parallel.trainers()), static_cast<int>(config.parallel.inferencers()),
                                  static_cast<int>(config.parallel.tp), static_cast<int>(config.parallel.ptp),
                                  static_cast<int>(config.parallel.pp), static_cast<int>(config.parallel.reward_ranks));
    } else if (const int64_t ranks = config.parallel.tp * config.parallel.pp; world->size() == 1 && ranks > 1) {
      require_mpi(fmt::format("--train-tp {} --pp {}", config.parallel.tp, config.parallel.pp));
      throw_user_error("--train-tp {} --pp {} without -i: the colocated mode's tensor-parallel ranks and pipeline stages "
                       "are processes; run `mpirun -np {} rlcpp train --train-tp {} --pp {} ...`", config.parallel.tp,
                       config.parallel.pp, ranks, config.parallel.tp, config.parallel.pp);
    } else if (world->size() != ranks) {
      throw_user_error("mpirun started {} processes but -i is not set and --train-tp {} x --pp {} is {}: give -t T -i I "
                       "with T + I = {}, or --train-tp and --pp whose product is {} for the colocated mode (or run "
                       "without mpirun)", world->size(), config.parallel.tp, config.parallel.pp, ranks, world->size(),
                       world->size());
    } else if (world->size() > 1) {
      topology = Topology::colocated(world, static_cast<int>(config.parallel.pp));  // one replica that trains and generates
    }
  } catch (const std::exception& e) {  // any failure: the other ranks must hear of it, not wait
    error = e.what();
  }
  if (world->size() == 1) {
    if (!error.empty()) throw UserError(error);
    return {config, topology};
  }
  auto failed = torch::zeros({world->size()}, torch::kInt64);
  failed[world->rank()] = error.empty() ? 0 : 1;
  world->all_reduce_sum(failed);
  const auto first = failed.nonzero();
  if (first.numel() == 0) return {config, topology};
  if (first[0][0].item<int64_t>() == world->rank()) {
    throw UserError(world->rank() == 0 ? error : fmt::format("[rank {}] {}", world->rank(), error));
  }
  std::exit(2);  // reported by another rank
}

// A rank's error under mpirun: its line, then the whole job ends (no rank is left waiting).
[[noreturn]] void abort_job(const Topology& topology, Communicator& world, const std::exception& e) {
  const bool user = dynamic_cast<const UserError*>(&e) != nullptr;
  // One write: std::cerr is unbuffered, so piecewise output from two failing ranks could
  // interleave within a line on the launcher's shared stream.
  const std::string line = topology.describe() + (user ? " error: " : " internal error: ") + e.what() + "\n";
  std::cerr << line << std::flush;
  // The launcher forwards each rank's output asynchronously, and an abort tears the job down at
  // once: a moment's grace lets the cause reach the user before the job ends. 500 ms was not
  // always enough with every core busy (dist_train's error-aborts-job lost the line once in CI).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  world.abort(user ? 2 : 3);
  std::_Exit(user ? 2 : 3);  // an abort does not return; should one, the process ends all the same
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "RL fine-tuning (GRPO, DAPO, ...) of a model on a JSONL dataset");
  auto flags = std::make_shared<RunFlags>();
  add_run_flags(cmd, *flags);
  auto chatlearn_fields = std::make_shared<bool>(false);
  auto dry_run = std::make_shared<bool>(false);
  auto skip_memory_check = std::make_shared<bool>(false);
  cmd->add_flag("--dry-run", *dry_run,
                "check the settings, print the run's estimated peak memory line by line, and exit without training");
  cmd->add_flag("--skip-memory-check", *skip_memory_check,
                "start even when the memory estimate exceeds what the machine has available");
  cmd->add_flag("--chatlearn-fields", *chatlearn_fields,
                "print how every ChatLearn config field is handled (implemented, mapped, refused, notice) and exit");
  cmd->callback([flags, chatlearn_fields, dry_run, skip_memory_check] {
    if (*chatlearn_fields) {
      std::cout << chatlearn_fields_markdown();
      return;
    }
    const RawSettings raw = collect_run_settings(*flags);
    if (flags->print_config) {
      std::cout << run_config_yaml(resolve_run_config(raw, /*check_files=*/false));
      return;
    }
    if (*dry_run) {
      const RunConfig config = resolve_run_config(raw);
      const auto estimate = estimate_run_memory(config);
      const double available = available_memory_bytes(config.runtime.device);
      std::cout << fmt::format("estimated peak memory of {} (one {} process):\n{}available now: {:.2f} GiB ({})\n",
                               config.model.path, config.parallel.distributed() ? "trainer" : "training", estimate.table(),
                               available / (1024.0 * 1024.0 * 1024.0), config.runtime.device);
      return;
    }
    auto world = mpi_world();  // a world of one process without mpirun
    const auto [config, topology] = prepare(raw, world, !*skip_memory_check);
    set_comm_timeout(config.parallel.comm_timeout);
    {  // files and threads: MPI's to each peer, the run's own files, a remote backend's connections
      const int64_t peers = world->size(), remote = config.remote.enabled() ? 8 * config.remote.concurrency : 0;
      ensure_process_limits(256 + 16 * peers + remote, 128 + 8 * peers + remote, "this run");
    }
    if (config.logging.debug) spdlog::set_level(spdlog::level::debug);
    if (!topology) {
      run_colocated(config);
      return;
    }
    if (!config.parallel.distributed()) {  // colocated over tensor-parallel ranks: an error on one ends the job
      try {
        run_colocated(config, &*topology);
      } catch (const std::exception& e) {
        abort_job(*topology, *world, e);
      }
      return;
    }
    // From here an error on one rank ends the whole job: no rank is left waiting for it.
    try {
      run_distributed(config, *topology);
    } catch (const std::exception& e) {
      abort_job(*topology, *world, e);
    }
  });
}

}  // namespace rlcpp
