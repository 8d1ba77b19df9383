# Shared by the CLI script tests that source it: `fail` counts a failure, `refused` checks a
# refusal. The sourcing script sets $dptrain and failures=0, and exits non-zero when failures > 0.

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# refused NAME NEEDLE ARGS...: `dptrain ARGS` exits non-zero with one line on stderr starting
# with "dptrain" (a usage text may follow it) and holding NEEDLE.
refused() {
  local name=$1 needle=$2
  shift 2
  local err rc
  err=$("$dptrain" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 0 ]; then
    fail "$name: exit 0"
  elif [[ $err != *"$needle"* ]]; then
    fail "$name: '$err' lacks '$needle'"
  elif [ "$(head -c 20000 <<<"$err" | grep -c '^dptrain')" -ne 1 ]; then
    fail "$name: not one line: $err"
  else
    echo "ok: $name: $(head -1 <<<"$err")"
  fi
}
