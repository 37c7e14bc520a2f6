// `rlcpp train-rm`: a reward model trained on preference pairs (Bradley–Terry), with the run
// settings, checkpoints and resume of `rlcpp train`; its step-N directories are
// ...ForSequenceClassification models that `rlcpp train --reward-model` and transformers load.
#include <iostream>

#include "app/commands.h"
#include "app/run_flags.h"
#include "rl/modes/reward_model.h"
#include "rl/modes/sft.h"

namespace rlcpp {

void add_train_rm_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train-rm", "train a reward model on preference pairs (Bradley-Terry)");
  auto flags = std::make_shared<RunFlags>();
  add_run_flags(cmd, *flags,
                {"runtime.dataset", "runtime.num_episodes", "parallel.zero_stage", "parallel.tensor_parallel_size",
                 "parallel.pipeline_parallel_size", "parallel.pp_balance",
                 "runtime.max_steps", "runtime.seed", "runtime.device",
                 "runtime.dtype", "runtime.resume", "runtime.checkpoint_path", "runtime.enable_resume_training",
                 "runtime.skip_bad_lines", "model.path", "train.train_batch_size", "train.train_microbatch_size",
                 "train.max_tokens_per_micro_batch", "train.padding_free", "train.learning_rate", "train.weight_decay", "train.max_grad_norm", "train.lr_schedule",
                 "train.warmup_steps", "train.min_lr_ratio", "train.center_rewards_coefficient",
                 "train.gradient_checkpointing", "eval.eval_dataset", "eval.eval_interval", "logging.project",
                 "logging.save_dir", "logging.save_interval", "logging.max_checkpoints", "logging.log_interval",
                 "logging.profile_dir",
                 // LoRA (the score head trains whole beside the adapters) and a half-precision frozen base
                 "model.lora_rank", "model.enable_lora", "model.lora_alpha", "model.lora_scaling", "model.lora_dropout",
                 "model.lora_target_modules", "model.lora_name_scope", "model.frozen_dtype"});
  cmd->callback([flags] {
    RawSettings raw = collect_run_settings(*flags);
    one_minibatch_per_step(raw, "train-rm");  // a step's pairs, micro-batches of -tmbs pairs
    const int64_t zero = take_supervised_zero(raw);  // shards over the processes (give_supervised_zero)
    // -ed may name one file: the set "eval".
    if (raw.values.contains("eval.eval_dataset") && raw.values["eval.eval_dataset"].is_string()) {
      const std::string value = raw.values["eval.eval_dataset"].get<std::string>();
      if (!value.empty() && value.front() != '{') raw.set("eval.eval_dataset", Json({{"eval", value}}).dump(), "-ed/--eval-dataset");
    }
    RunConfig config = resolve_run_config(raw, /*check_files=*/false);
    give_supervised_zero(config, zero);
    if (flags->print_config) {
      std::cout << run_config_yaml(config);
      return;
    }
    run_or_end_job([&] { run_reward_model_training(config); });
  });
}

}  // namespace rlcpp
