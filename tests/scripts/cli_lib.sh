# Shared by the CLI script tests that source it: `fail` counts a failure, `refused` checks a
# refusal, `make_idx` writes a small IDX data set, `final_hash` reads a run's param_hash,
# `max_diff` compares two weight files. The sourcing script sets $dptrain and
# failures=0, and exits non-zero when failures > 0.

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

# be32 N: N as 4 big-endian bytes.
be32() { printf "\\x$(printf %02x $(($1 >> 24 & 255)))\\x$(printf %02x $(($1 >> 16 & 255)))\\x$(printf %02x $(($1 >> 8 & 255)))\\x$(printf %02x $(($1 & 255)))"; }

# make_idx DIR SPLIT COUNT [SIDE]: random SIDExSIDE images (default 8x8), labels cycling 0..9.
make_idx() {
  local dir=$1 split=$2 n=$3 side=${4:-8}
  mkdir -p "$dir"
  { be32 2051; be32 "$n"; be32 "$side"; be32 "$side"; head -c $((n * side * side)) /dev/urandom; } >"$dir/$split-images-idx3-ubyte"
  { be32 2049; be32 "$n"; for ((i = 0; i < n; ++i)); do printf "\\x0$((i % 10))"; done; } >"$dir/$split-labels-idx1-ubyte"
}

# final_hash FILE: the param_hash of the "final" JSON lines in FILE (every rank's), distinct
# values space-separated: one value when the ranks agree.
final_hash() {
  grep '"final": true' "$1" | grep -o '"param_hash": "[0-9a-f]*"' | sort -u |
    sed 's/.*"\([0-9a-f]*\)"$/\1/' | tr '\n' ' ' | sed 's/ $//'
}

# max_diff A B: the largest difference between two weight files of one model (the same
# tensors; their headers' metadata may differ in length), as floats: "D over N", or "none"
# (a file missing or empty, or the two of different lengths).
max_diff() {
  local ha hb
  [ -s "$1" ] && [ -s "$2" ] || { echo none; return; }
  ha=$(od -A n -t u8 -N 8 "$1" | tr -d ' ') hb=$(od -A n -t u8 -N 8 "$2" | tr -d ' ')
  paste <(od -A n -v -t f4 -w4 -j $((8 + ha)) "$1") <(od -A n -v -t f4 -w4 -j $((8 + hb)) "$2") |
    awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ }
         END { if (n == 0 || bad) print "none"; else printf "%.3g over %d\n", m, n }'
}
