#!/usr/bin/env bash
# The Python environment rlcpp builds and tests with: a virtual environment of its own (a cache
# folder, never the system Python) holding the pinned packages of scripts/requirements.txt, among
# them the torch wheel whose LibTorch rlcpp links against.
#   bash scripts/python_env.sh            install (or bring up to date); idempotent
#   bash scripts/python_env.sh --python   print the environment's python (installed or not)
# $RLCPP_VENV names another folder. The environment is (re)installed only when the requirements
# file changed since it was last installed (a stamp holds its hash).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${RLCPP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rlcpp/venv}
requirements=${RLCPP_REQUIREMENTS:-$here/requirements.txt}

if [ "${1:-}" = "--python" ]; then
  echo "$venv/bin/python"
  exit 0
fi

want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.rlcpp-requirements" 2>/dev/null)" = "$want" ]; then
  echo "python env: $venv is up to date"
  exit 0
fi

base=$(command -v python3 || true)
if [ -z "$base" ]; then
  echo "python env: no python3 on the PATH; install it (apt-get install python3 python3-venv) and run again" >&2
  exit 1
fi
mkdir -p "$(dirname "$venv")"
(
  flock 9  # two installs at once (make test and make demo) would write over each other
  if [ "$(cat "$venv/.rlcpp-requirements" 2>/dev/null)" = "$want" ]; then exit 0; fi
  start=$(date +%s)
  rm -f "$venv/.rlcpp-requirements"
  if [ ! -x "$venv/bin/python" ] && ! "$base" -m venv "$venv"; then
    echo "python env: '$base -m venv $venv' failed; on Debian install python3-venv (bash scripts/deps.sh does)" >&2
    exit 1
  fi
  echo "python env: installing $(grep -cv '^\s*\(#\|$\)' "$requirements") pinned packages into $venv (torch's wheels are about 3 GB)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements"
  echo "$want" > "$venv/.rlcpp-requirements"
  echo "python env: installed in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)"
) 9> "$(dirname "$venv")/.venv-install.lock"
