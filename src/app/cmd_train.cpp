// `rlcpp train`: GRPO/DAPO fine-tuning of a Hugging Face model on a JSONL dataset, colocated in
// one process. Flags keep the reference system's short and long names.
#include <fmt/format.h>

#include "app/commands.h"
#include "rl/colocated.h"
#include "util/error.h"

namespace rlcpp {

namespace {

struct TrainArgs {
  RunConfig run;
  std::string algo = "GRPO";
  std::string reward_type = "boxed";
  std::optional<double> kl_coef;
  int64_t num_trainers = 0, num_inferencers = 0;
  std::string backend = "native";
  int64_t tp = 1, pp = 1, zero = 0;
};

void run_train(TrainArgs args) {
  if (args.num_trainers > 1 || args.num_inferencers > 1) {
    throw_user_error("-t {} -i {}: distributed training (separate trainer and rollout processes over MPI) is not "
                     "implemented yet; run without -t/-i for the colocated single-process mode",
                     args.num_trainers, args.num_inferencers);
  }
  if (args.backend != "native") {
    throw_user_error("-b/--backend {}: only the native engine exists (no vLLM backend yet)", args.backend);
  }
  if (args.tp != 1 || args.pp != 1 || args.zero != 0) {
    throw_user_error("-tp {} -pp {} -zero {}: tensor/pipeline parallelism and ZeRO are not implemented yet",
                     args.tp, args.pp, args.zero);
  }
  args.run.algo = algo_preset(args.algo, "-a/--algo");
  if (args.kl_coef) args.run.algo.loss.kl_coef = *args.kl_coef;
  args.run.reward_type = parse_reward_type(args.reward_type, "-rt/--reward-type");
  run_colocated(args.run);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "RL fine-tuning (GRPO, DAPO, ...) of a model on a JSONL dataset");
  auto a = std::make_shared<TrainArgs>();
  auto& r = a->run;
  cmd->add_option("-m,--model", r.model, "Hugging Face model directory")->required();
  cmd->add_option("-d,--dataset", r.dataset, "training JSONL ({\"messages\", \"gt_answer\"})")->required();
  cmd->add_option("-p,--project", r.project, "run name (folder under --save-dir)")->capture_default_str();
  cmd->add_option("-e,--num-episodes", r.num_episodes, "passes over the dataset")->capture_default_str();
  cmd->add_option("--max-steps", r.max_steps, "stop after N steps (0: the episodes decide)")->capture_default_str();
  cmd->add_option("-g,--num-generations", r.num_generations, "samples per prompt (G)")->capture_default_str();
  cmd->add_option("--tbs,--train-batch-size", r.train_batch_size, "prompts per step")->capture_default_str();
  cmd->add_option("--tMbs,--train-minibatch-size", r.train_minibatch_size, "prompts per optimizer step")->capture_default_str();
  cmd->add_option("--tmbs,--train-microbatch-size", r.train_microbatch_size, "samples per forward/backward")->capture_default_str();
  cmd->add_option("--temp,--temperature", r.sampling.temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--topk,--top-k", r.sampling.top_k, "0: off")->capture_default_str();
  cmd->add_option("--topp,--top-p", r.sampling.top_p, "1: off")->capture_default_str();
  cmd->add_option("-s,--system-prompt", r.system_prompt, "system prompt (default: the reward type's)")
      ->each([a](const std::string&) { a->run.system_prompt_set = true; });
  cmd->add_option("--mnt,--max-new-tokens", r.sampling.max_new_tokens, "response length cap")->capture_default_str();
  cmd->add_option("--mpt,--max-prompt-tokens", r.max_prompt_tokens, "prompt length cap (0: none)")->capture_default_str();
  cmd->add_option("-a,--algo", a->algo, "GRPO | DAPO | DR_GRPO | RLOO | REINFORCE_PP")->capture_default_str();
  cmd->add_option("--lr,--learning-rate", r.optimizer.lr, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--kl,--kl-coeff", a->kl_coef, "KL coefficient β (default: the preset's)");
  cmd->add_option("--rt,--reward-type", a->reward_type, "boxed | think_answer_tags | answer_line")->capture_default_str();
  cmd->add_option("--si,--save-interval", r.save_interval, "steps between checkpoints (0: at the end)")->capture_default_str();
  cmd->add_option("--sd,--save-dir", r.save_dir, "where runs are written")->capture_default_str();
  cmd->add_option("--seed", r.seed, "data order and sampling seed")->capture_default_str();
  cmd->add_option("--dtype", r.dtype, "float32 | bfloat16")->capture_default_str();
  cmd->add_option("--device", r.device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--kv-cache-mb", r.kv_cache_mb, "KV cache budget")->capture_default_str();
  cmd->add_option("-t,--num-trainers", a->num_trainers, "trainer processes (distributed mode: not yet)");
  cmd->add_option("-i,--num-inferencer", a->num_inferencers, "rollout processes (distributed mode: not yet)");
  cmd->add_option("-b,--backend", a->backend, "generation backend (native)")->capture_default_str();
  cmd->add_option("--tp", a->tp, "tensor parallel size (not yet)");
  cmd->add_option("--pp", a->pp, "pipeline parallel size (not yet)");
  cmd->add_option("--zero", a->zero, "ZeRO stage (not yet)");
  cmd->callback([a] { run_train(*a); });
}

}  // namespace rlcpp
