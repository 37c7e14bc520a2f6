#!/usr/bin/env bash
# Installs the anchors' Python packages (bench/anchors/requirements.txt: TRL, datasets, and
# llama-cpp-python compiled from its sdist for the CPU) for the bench scripts; `make test` never
# runs it. They go into a virtual environment of their own, ~/.cache/rlcpp/bench-venv, layered over
# rlcpp's (scripts/python_env.sh): a .pth file puts rlcpp's site-packages after its own, so the
# anchors run the same torch wheel (the LibTorch rlcpp links) and transformers as rlcpp, without a
# second copy of them, and rlcpp's environment stays exactly as scripts/requirements.txt pins it.
#
#   bash bench/anchors/install.sh    # prints the environment's python; the first time compiles llama.cpp
#                                    # (about 13 CPU-minutes), 340 MB over rlcpp's environment
#
# Env: RLCPP_BENCH_VENV (default ~/.cache/rlcpp/bench-venv), RLCPP_VENV (rlcpp's, as python_env.sh),
# BUILD_JOBS (the llama.cpp compile's jobs, default every core). Idempotent: a stamp
# holds the hash of the requirements and of rlcpp's environment; nothing runs when both are
# unchanged. Progress goes to stderr; exit 2 when rlcpp's environment is missing or the install fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rlcpp
venv=${RLCPP_BENCH_VENV:-$cache/bench-venv}
requirements=$here/requirements.txt
base=$(bash "$src/scripts/python_env.sh" --python)
[ -x "$base" ] || { echo "bench/anchors/install.sh: rlcpp's Python environment ($base) is missing: make deps" >&2; exit 2; }
base_site=$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
base_version=$("$base" -c 'import sys; print(sys.version)')
want=$( { cat "$requirements" "$(dirname "$(dirname "$base")")/.rlcpp-requirements" 2>/dev/null; echo "$base_version"; } |
  sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.rlcpp-bench-requirements" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"
  exit 0
fi
mkdir -p "$(dirname "$venv")"
(
  flock 9  # two bench runs starting together would install over each other
  if [ "$(cat "$venv/.rlcpp-bench-requirements" 2>/dev/null)" = "$want" ]; then exit 0; fi
  start=$(date +%s)
  "$base" -c 'import torch, transformers' 2>/dev/null ||
    { echo "bench/anchors/install.sh: rlcpp's Python environment ($base) lacks torch or transformers: make deps" >&2; exit 2; }
  rm -f "$venv/.rlcpp-bench-requirements"
  # Another interpreter under rlcpp's environment: this one's compiled packages would not load.
  if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import sys; print(sys.version)')" != "$base_version" ]; then
    rm -rf "$venv"
  fi
  # The same interpreter as rlcpp's environment, so its compiled packages load here too.
  [ -x "$venv/bin/python" ] || "$base" -m venv --without-pip "$venv" && "$venv/bin/python" -c 1 ||
    { echo "bench/anchors/install.sh: could not create $venv" >&2; exit 2; }
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$base_site" > "$site/rlcpp-venv.pth"  # after this environment's own site-packages on sys.path
  echo "bench/anchors/install.sh: installing the anchors' packages into $venv (llama-cpp-python compiles llama.cpp: minutes)" >&2
  # rlcpp's pip, aimed at this environment; its packages count as installed (they are on sys.path)
  # and pip never uninstalls outside this environment.
  # CPU only, tuned for this CPU as llama.cpp builds by default; no multimodal library (mtmd).
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DLLAVA_BUILD=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=${BUILD_JOBS:-$(nproc)} \
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2 ||
    { echo "bench/anchors/install.sh: pip install -r $requirements failed" >&2; exit 2; }
  "$venv/bin/python" -c 'import trl, datasets, llama_cpp, torch' ||
    { echo "bench/anchors/install.sh: the installed packages do not import" >&2; exit 2; }
  echo "$want" > "$venv/.rlcpp-bench-requirements"
  echo "bench/anchors/install.sh: installed in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)" >&2
) 9> "$(dirname "$venv")/.bench-venv-install.lock"
echo "$venv/bin/python"
