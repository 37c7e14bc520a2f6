"""A LoRA adapter as Hugging Face PEFT writes it, on BASE_DIR, with random (non-zero) A and B so that
it changes the logits (tests/test_interop.sh):

    python peft_adapter.py BASE_DIR OUT_DIR [--target-modules all-linear] [--rank 4] [--alpha 8] [--b-scale 10]

Without --target-modules, PEFT's default for the architecture (q_proj and v_proj for Qwen2, Qwen3
and Llama). base_model_name_or_path is BASE_DIR as given (pass an absolute path)."""
import argparse

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("base")
p.add_argument("out")
p.add_argument("--target-modules")
p.add_argument("--rank", type=int, default=4)
p.add_argument("--alpha", type=int, default=8)
p.add_argument("--b-scale", type=float, default=10.0)
a = p.parse_args()

torch.manual_seed(7)
model = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32)
config = LoraConfig(r=a.rank, lora_alpha=a.alpha, target_modules=a.target_modules, init_lora_weights=False,
                    task_type="CAUSAL_LM")
peft_model = get_peft_model(model, config)
with torch.no_grad():  # PEFT's random init makes B small; scale it so the adapter moves logits clearly
    for name, param in peft_model.named_parameters():  # (not so much that fp32's rounding dominates)
        if "lora_B" in name:
            param.mul_(a.b_scale)
peft_model.save_pretrained(a.out)
print(f"{a.out}: PEFT adapter r={a.rank} alpha={a.alpha} on {sorted(config.target_modules)}")
