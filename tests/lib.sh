# Sourced by the shell tests after they resolve their arguments: `here` (the tests folder),
# `fixtures`, a scratch directory `tmp` that becomes the working directory and is removed at exit
# (with `cleanup_extra`, if the test defines it, run first), and ok/bad reporting into `failed`.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fixtures=${RLCPP_FIXTURES:-${RLCPP_DEFAULT_FIXTURES:-}}
tmp=$(mktemp -d)
trap 'declare -F cleanup_extra > /dev/null && cleanup_extra; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
failed=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; failed=1; }
