"""TRL anchor of bench/train_step.sh and bench/trl.sh: TRL's own GRPOTrainer (the pinned `trl`, CPU,
fp32, full fine-tune), on the settings rlcpp's GRPO runs with, timed per phase.

    python trl_grpo_step.py step  --model DIR --prompts JSONL [--group 4 --tbs 2 --tmbs 4 --mnt 64
                                  --lr 1e-6 --steps 4 --beta 0 --loss-type grpo] [--json OUT]
    python trl_grpo_step.py learn --model models/arith-tiny --prompts examples/arith/train.jsonl
                                  --test examples/arith/test.jsonl [--steps 60 --group 8 --tbs 16 --tmbs 128
                                  --mnt 32 --lr 5e-5 --beta 0 --eval-limit 100 --eval-mnt 32] [--json OUT]

Run with the bench environment's python (bash bench/anchors/install.sh prints it).

The settings are mapped onto TRL's as rlcpp's GRPO preset defines them: a step is --tbs prompts x
--group samples (TRL's generation batch: one generate call for all of them), micro-batches of --tmbs
samples (per_device_train_batch_size; gradient accumulation over the rest) and one AdamW step
(lr constant, weight decay 0.01, betas 0.9/0.999, eps 1e-8, grad-norm clip 1.0), clip 0.2/0.2,
advantages (r - mean) / (std + 1e-4) per group, --beta the KL coefficient (0: no reference model),
--loss-type TRL's loss aggregation ("grpo": mean over each response, then over the samples, rlcpp's
sample_level), sampling at temperature 1 with no top-k/top-p, at most --mnt new tokens. Records
without a system message get rlcpp's default for the boxed reward (as `rlcpp train -rt boxed`).
The reward is rlcpp's boxed reward: 1 when the last \\boxed{...} of a response that stopped before
--mnt equals the record's gt_answer, else 0.

step: the figures of the steps after the first (the first is warm-up), each step's phases timed by
hooks on TRL's methods: generate (model.generate of the whole batch), reward, logprobs (old and
reference log-probs computed before training; TRL skips the old ones on-policy, as rlcpp does),
train (every micro-batch's forward and backward, the gradient clip and AdamW), other (the rest:
prompt tokenization, advantages, bookkeeping), total; peak RSS of the process. Prints one line per
step ("step N: total 1.23s | generate 0.45s | ..."), then the JSON.
learn: greedy held-out accuracy on the first --eval-limit records of --test (transformers'
generate, --eval-mnt new tokens) before and after --steps GRPO steps, with the mean training
reward per step; JSON out.
"""
import argparse
import json
import math
import os
import re
import resource
import sys
import tempfile
import time
import warnings
from collections import defaultdict

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 renames TRL still calls

BOXED_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def extract_boxed(text):
    """The content of the last \\boxed{...} or \\fbox{...} (nested braces matched), else None."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = text.find("{", start)
    if i < 0:  # "\boxed X": up to the next '$' or the end
        rest = text[start + len("\\boxed"):]
        return rest.strip().split("$")[0].strip() if rest.startswith(" ") else None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return None


def normalize(answer):
    answer = answer.strip().replace(" ", "").replace(",", "").replace("$", "").rstrip(".")
    answer = re.sub(r"\\text\{(.*?)\}", r"\1", answer)
    try:
        value = float(answer)
        return str(int(value)) if value == int(value) else str(value)
    except (ValueError, OverflowError):
        return answer


def correct(response, truth):
    got = extract_boxed(response)
    return got is not None and normalize(got) == normalize(str(truth))


def load_records(path, limit=0):
    records = []
    with open(path) as f:
        for line in f:
            if line.strip():
                records.append(json.loads(line))
                if limit and len(records) == limit:
                    break
    prompts = []
    for r in records:
        messages = [m for m in r["messages"] if m["role"] != "assistant"]
        if not messages or messages[0]["role"] != "system":
            messages = [{"role": "system", "content": BOXED_SYSTEM}] + messages
        prompts.append({"prompt": messages, "gt_answer": str(r.get("gt_answer", ""))})
    return prompts


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def make_trainer(args, model_dir, records, out_dir):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    eos_ids = {model.config.eos_token_id} if isinstance(model.config.eos_token_id, int) else set(model.config.eos_token_id)
    rewards_seen = []

    def boxed_reward(prompts, completions, completion_ids, gt_answer, **kwargs):
        out = []
        for completion, ids, truth in zip(completions, completion_ids, gt_answer):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            truncated = len(ids) >= args.mnt and (not ids or ids[-1] not in eos_ids)
            out.append(1.0 if not truncated and correct(text, truth) else 0.0)
        rewards_seen.append(sum(out) / max(len(out), 1))
        return out

    n = args.tbs * args.group
    if n % args.tmbs:
        sys.exit(f"trl_grpo_step.py: --tbs x --group ({n}) is not a multiple of --tmbs ({args.tmbs})")
    tmbs = min(args.tmbs, n)
    config = GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, seed=args.seed, data_seed=args.seed,
        per_device_train_batch_size=tmbs, gradient_accumulation_steps=n // tmbs, num_generations=args.group,
        max_completion_length=args.mnt, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.01,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
        beta=args.beta, epsilon=0.2, loss_type=args.loss_type, scale_rewards="group", num_iterations=1,
        max_steps=args.steps, logging_steps=1, report_to="none", save_strategy="no", log_completions=False,
        dataloader_num_workers=0, disable_tqdm=True,
    )

    class Timed(GRPOTrainer):
        """GRPOTrainer with each phase of a step timed (seconds, summed over the current step)."""

        def __init__(self, *a, **kw):
            self.phase = defaultdict(float)
            self.in_rollout = False
            super().__init__(*a, **kw)

        def _timed(self, name, fn, *a, **kw):
            start = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.phase[name] += time.perf_counter() - start

        def _generate_and_score_completions(self, inputs):
            self.in_rollout = True
            try:
                return self._timed("rollout", super()._generate_and_score_completions, inputs)
            finally:
                self.in_rollout = False

        def _generate_single_turn(self, *a, **kw):
            return self._timed("generate", super()._generate_single_turn, *a, **kw)

        def _calculate_rewards(self, *a, **kw):
            return self._timed("reward", super()._calculate_rewards, *a, **kw)

        def _get_per_token_logps_and_entropies(self, *a, **kw):
            fn = super()._get_per_token_logps_and_entropies
            return self._timed("logprobs", fn, *a, **kw) if self.in_rollout else fn(*a, **kw)

    steps = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, targs, state, control, **kw):
            trainer.phase.clear()
            self.start = time.perf_counter()

        def on_step_end(self, targs, state, control, **kw):
            total = time.perf_counter() - self.start
            p = dict(trainer.phase)
            row = {"total": total, "generate": p.get("generate", 0.0), "reward": p.get("reward", 0.0),
                   "logprobs": p.get("logprobs", 0.0), "train": total - p.get("rollout", 0.0)}
            row["other"] = total - row["generate"] - row["reward"] - row["logprobs"] - row["train"]
            row["reward_mean"] = rewards_seen[-1] if rewards_seen else 0.0
            steps.append(row)
            print(f"step {len(steps) - 1}: " + " | ".join(f"{k} {row[k]:.2f}s" for k in
                  ["total", "generate", "reward", "logprobs", "train", "other"])
                  + f" | reward {row['reward_mean']:.3f} | peak RSS {peak_rss_mib():.0f} MiB", flush=True)

    trainer = Timed(model=model, reward_funcs=boxed_reward, args=config, train_dataset=Dataset.from_list(records),
                    processing_class=tokenizer, callbacks=[StepTimer()])
    return trainer, steps


def mean_of_later(steps):
    later = steps[1:] or steps
    return {k: sum(s[k] for s in later) / len(later) for k in later[0]} if later else {}


def evaluate(model, tokenizer, records, mnt, batch=64):
    """Greedy accuracy of model on records (left-padded batches, transformers' generate)."""
    import torch
    tokenizer.padding_side = "left"
    right, lengths = 0, []
    model.eval()
    for i in range(0, len(records), batch):
        chunk = records[i:i + batch]
        texts = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=mnt, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        for r, ids in zip(chunk, out[:, enc["input_ids"].shape[1]:]):
            ids = ids.tolist()
            eos = model.generation_config.eos_token_id
            eos = {eos} if isinstance(eos, int) else set(eos or [])
            stop = next((k for k, t in enumerate(ids) if t in eos), None)
            truncated = stop is None
            ids = ids[:stop] if stop is not None else ids
            lengths.append(len(ids) + (0 if truncated else 1))
            right += (not truncated) and correct(tokenizer.decode(ids, skip_special_tokens=True), r["gt_answer"])
    model.train()
    return {"prompts": len(records), "accuracy": right / max(len(records), 1),
            "response_length_mean": sum(lengths) / max(len(lengths), 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["step", "learn"])
    parser.add_argument("--model", required=True, help="a Hugging Face model directory with its tokenizer")
    parser.add_argument("--prompts", required=True, help="JSONL records: messages (and gt_answer)")
    parser.add_argument("--test", help="learn: the held-out JSONL")
    for name, kind, default in [("group", int, 4), ("tbs", int, 2), ("tmbs", int, 0), ("mnt", int, 64),
                                ("lr", float, 1e-6), ("steps", int, 4), ("beta", float, 0.0), ("seed", int, 0),
                                ("eval-limit", int, 100), ("eval-mnt", int, 32), ("threads", int, 0)]:
        parser.add_argument(f"--{name}", type=kind, default=default)
    parser.add_argument("--loss-type", default="grpo", help="TRL's loss_type (grpo = rlcpp's sample_level)")
    parser.add_argument("--json", help="also write the JSON here")
    args = parser.parse_args()
    args.tmbs = args.tmbs or args.group
    import torch
    torch.set_num_threads(args.threads or os.cpu_count())
    import trl
    import transformers
    transformers.utils.logging.disable_progress_bar()

    records = load_records(args.prompts, args.steps * args.tbs if args.mode == "step" else 0)
    result = {"anchor": "trl", "mode": args.mode, "trl": trl.__version__, "transformers": transformers.__version__,
              "torch": torch.__version__, "threads": torch.get_num_threads(), "model": os.path.abspath(args.model),
              "group": args.group, "tbs": args.tbs, "tmbs": args.tmbs, "mnt": args.mnt, "lr": args.lr,
              "steps": args.steps, "beta": args.beta, "loss_type": args.loss_type}
    print(f"TRL {trl.__version__} GRPOTrainer ({args.mode}): {args.steps} steps of {args.tbs} prompts x "
          f"{args.group} samples, micro-batch {args.tmbs}, max {args.mnt} new tokens, lr {args.lr}, beta {args.beta}, "
          f"loss {args.loss_type}, {torch.get_num_threads()} threads", flush=True)
    with tempfile.TemporaryDirectory() as out_dir:
        trainer, steps = make_trainer(args, args.model, records, out_dir)
        result["parameters"] = sum(p.numel() for p in trainer.model.parameters())
        if args.mode == "learn":
            test = load_records(args.test, args.eval_limit)
            start = time.perf_counter()
            result["before"] = evaluate(trainer.model, trainer.processing_class, test, args.eval_mnt)
            result["eval_seconds"] = time.perf_counter() - start
            print(f"held-out before: {json.dumps(result['before'])}", flush=True)
        start = time.perf_counter()
        trainer.train()
        result["train_seconds"] = time.perf_counter() - start
        result["steps_timed"] = steps
        result["mean"] = mean_of_later(steps)
        if args.mode == "learn":
            result["after"] = evaluate(trainer.model, trainer.processing_class, test, args.eval_mnt)
            result["reward_curve"] = [round(s["reward_mean"], 4) for s in steps]
            print(f"held-out after:  {json.dumps(result['after'])}", flush=True)
    result["peak_rss_mib"] = peak_rss_mib()
    mean = result["mean"]
    if mean:
        print(f"mean of steps {min(2, len(steps))}..{len(steps)}: " + " | ".join(
            f"{k} {mean[k]:.2f}s" for k in ["total", "generate", "reward", "logprobs", "train", "other"])
            + f"; peak RSS {result['peak_rss_mib']:.0f} MiB", flush=True)
    text = json.dumps(result)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if all(math.isfinite(s["total"]) for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
