#!/usr/bin/env bash
# scripts/gpu_check.sh: rlcpp on a GPU, in one command and one table (at most ~8 minutes on one H100
# with 16 cores). It builds rlcpp with the fast profile (no MPI, no tests, no benchmarks) against the
# LibTorch of the machine's Python and the dependency folder of scripts/gpu_deps.sh, then runs:
#   parity     every fixture on the device in fp32 and bf16, against its float64 reference;
#   grpo       a short GRPO run of the bundled model: step time, its phases, the engine/trainer
#              log-prob agreement; then the 0.5B and 1.5B shapes (random weights, bf16), with the
#              train phase's MFU against the GPU's bf16 peak;
#   decode     generate tokens/s at 1, 64 and 256 sequences and a prefill, against transformers'
#              generate in the same run (when the Python has transformers) and the HBM roofline;
#   lora       the bundled model's GRPO with LoRA adapters;
#   resume     4 steps against 2 steps and a resume to 4: the same bytes of weights, or how far apart;
#   interop    the device's GRPO and LoRA checkpoints read by transformers and PEFT (when present):
#              their logits against rlcpp's on the device.
#
#   bash scripts/gpu_check.sh [--deps gpu-deps.tar.xz] [--out gpu-check]
#   bash scripts/gpu_check.sh --rehearse     (here, no GPU: see below)
#   bash scripts/gpu_check.sh --rlcpp gpu-check/build/rlcpp   (the checks again, without the build)
#
# What it needs, refused at once and by name when missing: a Python with torch (RLCPP_PYTHON, else
# /opt/torch/.venv/bin/python3, else python3) and a CUDA device it sees; CMake >= 3.18, a C++20
# compiler, ninja or make; the dependency folder (gpu-deps.tar.xz or gpu-deps/ at the repository's
# root, made by `bash scripts/gpu_deps.sh` on a machine with scripts/deps.sh done) and the glibc it
# names; the fixtures, the bundled model and the Qwen tokenizer of the repository.
#
# --rehearse runs every step that needs no GPU, on this machine: the build in a clean folder with
# the system copies of the Debian libraries the dependency folder carries (and MPI's, GoogleTest's)
# hidden by bubblewrap, then each check on the CPU with small shapes. CI runs it (tests/CMakeLists.txt).
# Exit status: 0 when every row passed, 1 when one failed, 2 when something needed is missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rehearse=0 inside=0 deps="" out=gpu-check prebuilt=""
while [ $# -gt 0 ]; do
  case $1 in
    --rehearse) rehearse=1 ;;
    --inside) inside=1 ;;  # (the rehearsal, re-run inside bubblewrap)
    --deps) deps=${2:?--deps needs a file or folder}; shift ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    --rlcpp) prebuilt=$(realpath "${2:?--rlcpp needs a binary}"); shift ;;  # checks only, with this binary
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (--rehearse, --deps FILE|DIR, --out DIR, --rlcpp BINARY, --help)" >&2; exit 2 ;;
  esac
  shift
done
refuse() { echo "gpu_check: $*" >&2; exit 2; }
mkdir -p "$out"
out=$(realpath "$out")
started=$(date +%s)

# --- What it needs -------------------------------------------------------------------------------
if [ -n "${RLCPP_PYTHON:-}" ]; then py=$RLCPP_PYTHON
elif [ $rehearse = 1 ]; then py=$(bash scripts/python_env.sh --python)
elif [ -x /opt/torch/.venv/bin/python3 ]; then py=/opt/torch/.venv/bin/python3
else py=$(command -v python3 || true); fi
[ -n "$py" ] && [ -x "$py" ] || refuse "no Python with torch: set RLCPP_PYTHON to one"
torch_info=$("$py" -c "import torch, torch.utils; print(torch.__version__); print(torch.utils.cmake_prefix_path)" 2>/dev/null) ||
  refuse "$py cannot import torch: set RLCPP_PYTHON to a Python with torch 2.x"
torch_version=$(sed -n 1p <<< "$torch_info")
torch_dir=$(sed -n 2p <<< "$torch_info")/Torch
command -v cmake > /dev/null || refuse "no cmake on PATH (3.18 or later)"
cxx=${CXX:-$(command -v c++ || command -v g++ || true)}
[ -n "$cxx" ] || refuse "no C++ compiler (c++ or g++ on PATH, or CXX)"
if command -v ninja > /dev/null; then generator=(-G Ninja); else
  command -v make > /dev/null || refuse "neither ninja nor make on PATH"; generator=(); fi
if [ -z "$deps" ]; then
  for candidate in gpu-deps.tar.xz gpu-deps; do [ -e "$candidate" ] && deps=$candidate && break; done
fi
[ -n "$deps" ] && [ -e "$deps" ] || refuse "no dependency folder (gpu-deps.tar.xz or gpu-deps/ here, or --deps): run \
\`bash scripts/gpu_deps.sh\` on a Debian 12 machine where scripts/deps.sh has run, and bring gpu-deps.tar.xz"
if [ -f "$deps" ]; then
  rm -rf "$out/deps" && mkdir -p "$out/deps" && tar -C "$out/deps" --strip-components 1 -xJf "$deps" ||
    refuse "--deps $deps: not a tar.xz of scripts/gpu_deps.sh"
  deps=$out/deps
fi
deps=$(realpath "$deps")
[ -f "$deps/REQUIRES" ] || refuse "--deps $deps: no REQUIRES file; make it again with scripts/gpu_deps.sh"
need_glibc=$(awk '/^glibc/ {print $2}' "$deps/REQUIRES")
have_glibc=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9]\+\.[0-9]\+$' || true)
if [ -z "$have_glibc" ] || [ "$(printf '%s\n%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1)" != "$need_glibc" ]; then
  refuse "the dependency folder's libraries need glibc $need_glibc; this machine has ${have_glibc:-none found}"
fi
for f in tests/fixtures models/arith-tiny/config.json examples/arith/train.jsonl tests/data/tokenizers/qwen3/tokenizer.json; do
  [ -e "$f" ] || refuse "$f is missing from the repository copy"
done
if [ $rehearse = 1 ]; then
  device=cpu
  gpu="none (rehearsal on the CPU)"
else
  gpu=$("$py" -c "import torch; assert torch.cuda.is_available(); print(torch.cuda.get_device_name(0))" 2>/dev/null) ||
    refuse "torch in $py sees no CUDA device (torch.cuda.is_available() is False); --rehearse runs the CPU parts"
  device=cuda
fi

# --- The rehearsal hides the system's copies of what the dependency folder carries ----------------
if [ $rehearse = 1 ] && [ $inside = 0 ]; then
  command -v bwrap > /dev/null || refuse "--rehearse hides libraries with bubblewrap (bwrap): apt-get install bubblewrap"
  hidden_packages=$(awk '/^packages/ {$1=""; print}' "$deps/REQUIRES")
  # The libraries rlcpp links, by their runtime packages; MPI and GoogleTest, which the GPU machine lacks.
  hidden_packages+=" libyaml-cpp0.7 libspdlog1.10 libfmt9 libutf8proc2 libhwy1 libcpp-httplib0.11 libopenmpi-dev libgtest-dev libgmock-dev"
  printf '#error "hidden by scripts/gpu_check.sh --rehearse: this header must come from the dependency folder (scripts/gpu_deps.sh)"\n' > "$out/hidden.h"
  binds=()
  # shellcheck disable=SC2086
  while read -r f; do
    case "$f" in
      /usr/include/*) binds+=(--ro-bind "$out/hidden.h" "$f") ;;
      *) binds+=(--ro-bind /dev/null "$f") ;;
    esac
  done < <(dpkg -L $hidden_packages 2>/dev/null | grep -E '^/usr/(include|lib|share/cmake|share/pkgconfig)/' |
           while read -r f; do if [ -f "$f" ] && [ ! -L "$f" ]; then echo "$f"; fi; done)
  echo "gpu_check: rehearsal: $(( ${#binds[@]} / 3 )) system files hidden (the packages: $hidden_packages)"
  exec bwrap --dev-bind / / "${binds[@]}" -- bash "$0" --rehearse --inside --deps "$deps" --out "$out" ${prebuilt:+--rlcpp "$prebuilt"}
fi

# --- Build --------------------------------------------------------------------------------------
libs=$deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CCACHE_BASEDIR=$root
jobs=$(nproc)
echo "gpu_check: $gpu; torch $torch_version ($py); $jobs cores; building in $out/build"
build_start=$(date +%s)
if [ -n "$prebuilt" ]; then
  echo "gpu_check: checks only, with $prebuilt (--rlcpp)"
else
cmake -S . -B "$out/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
  -DRLCPP_FAST_BUILD=ON -DRLCPP_MPI=OFF -DRLCPP_TESTS=OFF -DRLCPP_BENCH=OFF -DTorch_DIR="$torch_dir" \
  -DCMAKE_PREFIX_PATH="$deps/usr" -DPKG_CONFIG_EXECUTABLE=PKG_CONFIG_EXECUTABLE-NOTFOUND > "$out/configure.log" 2>&1 ||
  { tail -20 "$out/configure.log"; refuse "configure failed ($out/configure.log)"; }
cmake --build "$out/build" --target rlcpp -j "$jobs" > "$out/build.log" 2>&1 ||
  { grep -m5 -B2 -A8 "error" "$out/build.log"; refuse "build failed ($out/build.log)"; }
fi
build_s=$(( $(date +%s) - build_start ))
rlcpp=${prebuilt:-$out/build/rlcpp}
# Every library rlcpp loads from outside the C/C++ runtimes comes from the folder or from LibTorch.
site_packages=$(realpath "$torch_dir/../../../..")
strays=$(ldd "$rlcpp" | awk '/=>/ {print $3}' | grep -vE "^($libs|$site_packages|.*/(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libdl|libpthread|librt|libutil)\.so)" || true)
table=$out/table.tsv
printf 'check\tsetting\tfigure\tverdict\n' > "$table"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$table"; }
row build "fast profile, $jobs cores" "${build_s} s" "$([ -z "$strays" ] && echo pass || echo "FAIL: loads $(echo $strays)")"
# Built without MPI: a mode of several processes, or a launcher's start, is refused by name.
mpi_refusal() {
  local setting=$1; shift
  if report=$("$@" 2>&1); then row build "$setting" "ran; expected a refusal" FAIL
  elif grep -q "built without MPI" <<< "$report"; then row build "$setting" "refused: $(grep -o '[^:]*: this needs several processes' <<< "$report" | head -1)" pass
  else row build "$setting" "$(tail -1 <<< "$report")" FAIL; fi
}
mpi_refusal "no MPI: -t 1 -i 1" "$rlcpp" train -m models/arith-tiny -d examples/arith/train.jsonl -t 1 -i 1 --max-steps 1 -sd "$out/refused"
mpi_refusal "no MPI: under a launcher" env OMPI_COMM_WORLD_SIZE=2 "$rlcpp" train -m models/arith-tiny -d examples/arith/train.jsonl --max-steps 1 -sd "$out/refused"

# --- Checks -------------------------------------------------------------------------------------
work=$out/work
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$jobs}
# metric FILE EXPR: a Python expression over `rows` (metrics.jsonl's steps) and `median`.
metric() {
  "$py" - "$1" "$2" <<'PY'
import json, statistics, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
median = statistics.median
print(eval(sys.argv[2]))
PY
}

# parity: each fixture, fp32 and bf16 (bf16 rounds weights and activations: 0.2 measured on the CPU,
# logits of magnitude ~10 whose bf16 step is 0.06; within 0.5).
for fixture in tests/fixtures/*/; do
  [ -f "$fixture/reference.safetensors" ] || continue
  for dtype in float32 bfloat16; do
    tol=$([ $dtype = float32 ] && echo 1e-4 || echo 0.5)
    if report=$("$rlcpp" parity "$fixture" --device $device --dtype $dtype 2>&1); then
      logits=$(grep -o 'logits - reference| *= [0-9.e+-]*' <<< "$report" | awk '{print $NF}')
      logprobs=$(grep -o 'token_logprobs - reference| *= [0-9.e+-]*' <<< "$report" | awk '{print $NF}')
      verdict=$(awk -v a="$logits" -v b="$logprobs" -v t="$tol" 'BEGIN {print (a <= t && b <= t) ? "pass" : "FAIL"}')
      row parity "$(basename "$fixture") $dtype" "logits $logits, log-probs $logprobs (tol $tol)" "$verdict"
    else
      row parity "$(basename "$fixture") $dtype" "$(tail -1 <<< "$report")" FAIL
    fi
  done
done

# grpo RUN_NAME ARGS...: a GRPO run on the device; its row, and the metrics file for what follows.
train_common=(-d examples/arith/train.jsonl -a GRPO --mnt 32 -temp 1.0 -lr 5e-5 --device $device -sd "$work/runs")
grpo() {
  local name=$1; shift
  if "$rlcpp" train "${train_common[@]}" -p "$name" "$@" > "$work/$name.log" 2>&1; then
    return 0
  fi
  row grpo "$name" "$(grep -m1 -i error "$work/$name.log" || tail -1 "$work/$name.log")" FAIL
  return 1
}
phases='"generate {:.2f} s, log-probs {:.2f} s, train {:.2f} s".format(*(median(r["time"][k] for r in rows[1:] or rows) for k in ("generate", "logprobs", "train")))'
if grpo bundled -m models/arith-tiny -g 8 -tbs 16 -tMbs 16 --max-steps 4 --si 4; then
  m=$work/runs/bundled/metrics.jsonl
  row grpo "bundled model, fp32, 16 x 8" "step $(metric "$m" '"{:.2f}".format(median(r["time"]["total"] for r in rows[1:]))') s: $(metric "$m" "$phases"); reward $(metric "$m" '"{:.2f}".format(rows[-1]["reward_mean"])')" pass
  max=$(metric "$m" 'max(r["mismatch_abs_max"] for r in rows)')
  row grpo "engine vs trainer log-probs" "max |dlogp| $max, mean $(metric "$m" '"{:.1e}".format(median(r["mismatch_abs_mean"] for r in rows))')" \
    "$(awk -v a="$max" 'BEGIN {print a <= 1e-3 ? "pass" : "FAIL"}')"
fi
source bench/qwen_shape.sh
# param_count MODEL_DIR: the weights of a Qwen2-shaped model with a tied head (its config.json).
param_count() {
  "$py" -c "import json; c=json.load(open('$1/config.json')); h,i,l,v=c['hidden_size'],c['intermediate_size'],c['num_hidden_layers'],c['vocab_size']; kvd=h//c['num_attention_heads']*c['num_key_value_heads']; print(l*(2*h*h+2*h*kvd+3*h*i)+v*h)"
}
peak=$("$py" - "$gpu" <<'PY'
import sys
name = sys.argv[1]  # dense bf16 TFLOP/s and HBM TB/s of the cards this is meant for
table = [("H200", 989, 4.8), ("H100 PCIe", 756, 2.0), ("H100 NVL", 835, 3.9), ("H100", 989, 3.35), ("A100", 312, 2.0)]
print(next((f"{t} {b}" for key, t, b in table if key in name), "0 0"))
PY
)
peak_tflops=${peak% *} hbm_tbs=${peak#* }
shapes=("0.5b 896 4864 24 14 2" "1.5b 1536 8960 28 12 2")
# On the GPU: bf16, 8 prompts x 8 samples. The rehearsal: 2 layers in fp32 (LibTorch's bf16 products on
# a CPU without bf16 instructions take minutes a step), 2 prompts x 4 samples.
if [ $rehearse = 1 ]; then shape_run=(--dtype float32 -tbs 2 -tMbs 2 -g 4) shape_samples=8 shape_label="fp32, 2 x 4"
else shape_run=(--dtype bfloat16 -tbs 8 -tMbs 8 -g 8) shape_samples=64 shape_label="bf16, 8 x 8"; fi
for shape in "${shapes[@]}"; do
  read -r name hidden inter layers heads kv <<< "$shape"
  [ $rehearse = 1 ] && layers=2
  model=$work/qwen-$name
  qwen_shape_model "$rlcpp" "$model" tests/data/tokenizers/qwen3 "$hidden" "$inter" "$layers" "$heads" "$kv" > /dev/null 2>&1 ||
    { row grpo "$name shape" "rlcpp init failed" FAIL; continue; }
  params=$(param_count "$model")
  if grpo "shape-$name" -m "$model" "${shape_run[@]}" --max-steps 3 --si 0; then
    m=$work/runs/shape-$name/metrics.jsonl
    mfu=$(metric "$m" "'{:.1f} %'.format(100 * 6 * $params * median(r['response_length_mean'] * $shape_samples / r['time']['train'] for r in rows[1:]) / ($peak_tflops * 1e12)) if $peak_tflops else 'n/a (CPU)'")
    row grpo "$name shape ($layers layers), $shape_label" "step $(metric "$m" '"{:.2f}".format(median(r["time"]["total"] for r in rows[1:]))') s: $(metric "$m" "$phases"); train MFU $mfu (response tokens only)" pass
  fi
done

# decode: generated tokens a second on the 0.5B shape (bf16; the rehearsal fp32), 1 prompt x n samples, against transformers.
model=$work/qwen-0.5b
decode_dtype=$([ $rehearse = 1 ] && echo float32 || echo bfloat16)
new=$([ $rehearse = 1 ] && echo 8 || echo 128)
counts=$([ $rehearse = 1 ] && echo "1 4 8" || echo "1 64 256")
have_hf=$("$py" -c "import transformers; print(1)" 2>/dev/null || echo 0)
params=$(param_count "$model")
for n in $counts; do
  if report=$("$rlcpp" generate -m "$model" --prompt "Count from one to one hundred." -n "$n" --mnt "$new" --temperature 1.0 \
                --device $device --dtype $decode_dtype 2>&1 > /dev/null); then
    ours=$(grep -o '([0-9.]* tokens/s)' <<< "$report" | tr -d '(' | awk '{print $1}')
  else
    row decode "$n sequences" "$(tail -1 <<< "$report")" FAIL; continue
  fi
  theirs="n/a (no transformers in $py)"
  if [ "$have_hf" = 1 ]; then
    theirs=$("$py" - "$model" "$n" "$new" "$device" "$decode_dtype" <<'PY' 2>/dev/null || echo "transformers failed"
import sys, time, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path, n, new, device, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], getattr(torch, sys.argv[5])
tok = AutoTokenizer.from_pretrained(path)
try:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
except TypeError:  # transformers before 4.56 names it torch_dtype
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype)
model = model.to(device).eval()
ids = tok.apply_chat_template([{"role": "user", "content": "Count from one to one hundred."}], add_generation_prompt=True, return_tensors="pt").to(device)
ids = ids if torch.is_tensor(ids) else ids["input_ids"]
def run():
    if device == "cuda": torch.cuda.synchronize()
    t = time.perf_counter()
    model.generate(ids, do_sample=True, num_return_sequences=n, max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
    if device == "cuda": torch.cuda.synchronize()
    return time.perf_counter() - t
run()  # warm-up
print(f"{n * new / run():.0f}")  # generated tokens a second, as rlcpp generate counts them
PY
)
  fi
  roof=$(awk -v n="$n" -v p="$params" -v b="$hbm_tbs" 'BEGIN {if (b > 0) printf "%.0f", n * b * 1e12 / (2 * p); else print "n/a"}')
  row decode "$n sequences x $new tokens, $decode_dtype" "rlcpp $ours tok/s; transformers $theirs tok/s; HBM roofline $roof tok/s" pass
done
prompt=$("$py" -c "print(' '.join(str(i) for i in range($([ $rehearse = 1 ] && echo 200 || echo 2000))))")
if report=$("$rlcpp" generate -m "$model" --prompt "$prompt" -n 1 --mnt 1 --device $device --dtype $decode_dtype 2>&1 > /dev/null); then
  read -r tokens seconds < <(grep -o '[0-9]* prompt + [0-9]* generated tokens in [0-9.]* s' <<< "$report" | awk '{print $1, $8}')
  row decode "prefill, one prompt" "$tokens tokens in $seconds s: $(awk -v t="$tokens" -v s="$seconds" 'BEGIN {printf "%.0f", t / s}') tok/s" pass
else
  row decode "prefill, one prompt" "$(tail -1 <<< "$report")" FAIL
fi

# lora: the bundled model with adapters of rank 8.
if grpo lora -m models/arith-tiny -g 8 --lora-rank 8 -tbs 16 -tMbs 16 --max-steps 3 --si 3; then
  m=$work/runs/lora/metrics.jsonl
  [ -f "$work/runs/lora/step-3/adapter_model.safetensors" ] && verdict=pass || verdict="FAIL: no adapter in step-3"
  row lora "bundled model, rank 8" "step $(metric "$m" '"{:.2f}".format(median(r["time"]["total"] for r in rows[1:]))') s; grad norm $(metric "$m" '"{:.3f}".format(rows[-1]["grad_norm"])')" "$verdict"
fi

# resume: 4 steps in one run, against 2 steps and a resume to 4.
resume_run=(-m models/arith-tiny -g 8 -tbs 8 -tMbs 8 --si 2)
if grpo resume-full "${resume_run[@]}" --max-steps 4 && grpo resume-cut "${resume_run[@]}" --max-steps 2 &&
   grpo resume-cut "${resume_run[@]}" --max-steps 4 --resume auto; then
  a=$work/runs/resume-full/step-4/model.safetensors b=$work/runs/resume-cut/step-4/model.safetensors
  if cmp -s "$a" "$b"; then row resume "4 steps vs 2 + resume 2" "the same bytes of weights" pass
  else row resume "4 steps vs 2 + resume 2" "weights differ: $("$py" -c "
from safetensors.torch import load_file
a, b = load_file('$a'), load_file('$b')
print('max |a - b| = {:.2e}'.format(max((a[k].float() - b[k].float()).abs().max().item() for k in a)))")" FAIL; fi
fi

# interop: the device's checkpoints in transformers and PEFT against rlcpp on the device.
if [ "$have_hf" = 1 ] && "$py" -c "import peft" 2>/dev/null; then
  for run in bundled lora; do
    dir=$work/runs/$run/$(cat "$work/runs/$run/latest" 2>/dev/null)
    [ -d "$dir" ] || continue
    adapter=()
    if [ -f "$dir/adapter_config.json" ]; then adapter=(--adapter "$dir"); base=models/arith-tiny; else base=$dir; fi
    if "$py" tests/py/hf_logits.py "$base" "$work/hf-$run.safetensors" --random-input 2,24 "${adapter[@]}" > /dev/null 2> "$work/hf-$run.err" &&
       report=$("$rlcpp" parity "$dir" --reference "$work/hf-$run.safetensors" --device $device 2>&1); then
      logits=$(grep -o 'logits - reference| *= [0-9.e+-]*' <<< "$report" | awk '{print $NF}')
      row interop "$run checkpoint, fp32" "|transformers - rlcpp on $device| logits $logits" "$(awk -v a="$logits" 'BEGIN {print a <= 1e-4 ? "pass" : "FAIL"}')"
    else
      row interop "$run checkpoint" "$(tail -1 "$work/hf-$run.err" 2>/dev/null) $(tail -1 <<< "${report:-}")" FAIL
    fi
  done
else
  row interop "transformers, PEFT" "n/a (not in $py)" "not run"
fi

# --- The table ----------------------------------------------------------------------------------
echo
column -t -s $'\t' "$table" 2>/dev/null || cat "$table"
echo
echo "gpu_check: $(( $(date +%s) - started )) s in all ($gpu); logs in $out"
! grep -q $'\tFAIL' "$table"
