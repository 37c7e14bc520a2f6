// `rlcpp sft`: supervised fine-tuning on chat JSONL, loss on assistant tokens only, with the run
// settings, checkpoints and resume of `rlcpp train`.
#include <iostream>

#include "app/commands.h"
#include "app/run_flags.h"
#include "rl/modes/sft.h"

namespace rlcpp {

void add_sft_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sft", "supervised fine-tuning on chat JSONL (loss on assistant turns)");
  auto flags = std::make_shared<RunFlags>();
  add_run_flags(cmd, *flags,
                {"runtime.dataset", "runtime.num_episodes", "parallel.zero_stage", "parallel.tensor_parallel_size",
                 "parallel.pipeline_parallel_size", "parallel.pp_balance",
                 "runtime.max_steps", "runtime.seed", "runtime.device",
                 "runtime.dtype", "runtime.resume", "runtime.checkpoint_path", "runtime.enable_resume_training",
                 "model.path", "rollout.system_prompt", "train.train_batch_size", "train.train_microbatch_size",
                 "train.max_tokens_per_micro_batch", "train.padding_free", "train.learning_rate", "train.weight_decay", "train.max_grad_norm", "train.lr_schedule",
                 "train.warmup_steps", "train.min_lr_ratio", "logging.project", "logging.save_dir",
                 "logging.save_interval", "logging.max_checkpoints", "logging.log_interval",
                 // LoRA, activation checkpointing and a half-precision frozen base, as in `train`
                 "model.lora_rank", "model.enable_lora", "model.lora_alpha", "model.lora_scaling", "model.lora_dropout",
                 "model.lora_target_modules", "model.lora_name_scope", "model.frozen_dtype",
                 "train.gradient_checkpointing", "logging.save_merged"});
  cmd->callback([flags] {
    RawSettings raw = collect_run_settings(*flags);
    one_minibatch_per_step(raw, "sft");  // a step's chats, micro-batches of -tmbs chats
    const int64_t zero = take_supervised_zero(raw);  // shards over the processes (give_supervised_zero)
    if (flags->print_config) {
      RunConfig config = resolve_run_config(raw, /*check_files=*/false);
      give_supervised_zero(config, zero);
      std::cout << run_config_yaml(config);
      return;
    }
    RunConfig config = resolve_run_config(raw);
    give_supervised_zero(config, zero);
    run_or_end_job([&] { run_sft(config); });
  });
}

}  // namespace rlcpp
