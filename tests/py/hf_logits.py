"""A model directory's outputs as transformers (and PEFT) compute them, in the layout of the fixtures'
reference.safetensors, for `rlcpp parity --reference` to compare with (tests/test_interop.sh):

    python hf_logits.py MODEL_DIR OUT.safetensors (--input REF.safetensors | --random-input B,T)
                        [--arch Qwen2ForCausalLM] [--adapter PEFT_DIR] [--compare REF.safetensors --tol 1e-5]

OUT holds input_ids int64 [B, T], logits float32 [B, T, V] and token_logprobs float32 [B, T-1],
computed in float32 (weights stored in bf16 are widened as loaded); for a sequence classifier (a
reward model or a PPO critic, config.json's architectures ...ForSequenceClassification) it holds
input_ids and scores float32 [B, num_labels], AutoModelForSequenceClassification's outputs. --arch: the class transformers
must pick for the directory (from config.json's architectures), else exit 1. --compare: prints the
largest differences from REF and exits 1 past --tol. Prints one JSON line of what it measured."""
import argparse
import json
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

p = argparse.ArgumentParser()
p.add_argument("model_dir")
p.add_argument("out")
p.add_argument("--input")
p.add_argument("--random-input")
p.add_argument("--arch")
p.add_argument("--adapter")
p.add_argument("--compare")
p.add_argument("--tol", type=float, default=1e-5)
a = p.parse_args()

torch.manual_seed(0)
if a.input:
    ids = load_file(a.input)["input_ids"].to(torch.int64)
else:
    b, t = map(int, a.random_input.split(","))
    vocab = AutoConfig.from_pretrained(a.model_dir).vocab_size
    ids = torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(1234))

config = AutoConfig.from_pretrained(a.model_dir)
classifier = any(name.endswith("ForSequenceClassification") for name in config.architectures or [])
auto = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM
model = auto.from_pretrained(a.model_dir, dtype=torch.float32)
arch = type(model).__name__
if a.adapter:
    from peft import PeftModel
    model = PeftModel.from_pretrained(model, a.adapter)
model.eval()
with torch.no_grad():
    logits = model(input_ids=ids).logits.float()
if classifier:  # the score head at each row's last token (no padding here)
    outputs = {"input_ids": ids.contiguous(), "scores": logits.contiguous()}
else:
    logprobs = torch.log_softmax(logits[:, :-1].double(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0].float()
    outputs = {"input_ids": ids.contiguous(), "logits": logits.contiguous(), "token_logprobs": logprobs.contiguous()}
save_file(outputs, a.out)

report = {"model": a.model_dir, "class": arch, "adapter": a.adapter, "input": list(ids.shape)}
status = 0
if a.arch and arch != a.arch:
    report["error"] = f"transformers loaded {arch}, expected {a.arch}"
    status = 1
if a.compare:
    ref = load_file(a.compare)
    diffs = {f"{key}_diff": (value.float() - ref[key].float()).abs().max().item()
             for key, value in outputs.items() if key != "input_ids"}
    report.update(diffs)
    if max(diffs.values()) > a.tol:
        report["error"] = f"differs from {a.compare} by more than {a.tol}"
        status = 1
print(json.dumps(report))
sys.exit(status)
