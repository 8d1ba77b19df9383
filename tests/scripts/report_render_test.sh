#!/usr/bin/env bash
# dptrain report in a real browser: a hand-written log's report rendered by headless Chromium
# to a PNG, which must not be blank (its pixels decoded with python3's zlib, its size against
# a blank page's), with no console message and no resource loaded. Exit 77 (skipped) where
# chromium is not installed.
# Usage: report_render_test.sh <dptrain> <scratch dir>
set -uo pipefail
dptrain=$1 scratch=$2
python=/usr/bin/python3
browser=""
for b in chromium chromium-browser; do
  command -v "$b" >/dev/null 2>&1 && { browser=$b; break; }
done
[ -n "$browser" ] || { echo "report_render: skipped: chromium not found" >&2; exit 77; }
rm -rf "$scratch" && mkdir -p "$scratch/log"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

"$python" - "$scratch/log" <<'PY'
import json, math, sys
d = sys.argv[1]
json.dump({"model": {"kind": "mlp"}, "replicas": 2}, open(d + "/settings.json", "w"))
with open(d + "/steps.jsonl", "w") as f:
    for i in range(1, 301):
        f.write(json.dumps({"step": i, "epoch": i // 100, "loss": 2.3 * math.exp(-i / 80) + 0.1,
                            "lr": 0.1 * min(1, i / 50), "grad_norm": None,
                            "samples_per_sec": 5000 + 300 * math.sin(i / 7), "seconds": 0.01,
                            "compute_seconds": 0.008, "exchange_seconds": 0.003,
                            "exposed_seconds": 0.001 + 0.0005 * math.cos(i / 9),
                            "skipped": i == 120, "rolled_back": i == 200}) + "\n")
with open(d + "/evals.jsonl", "w") as f:
    for e in range(3):
        f.write(json.dumps({"epoch": e, "step": 100 * (e + 1), "train_loss": 1, "loss": 1 - e / 4,
                            "accuracy": 0.5 + e / 10, "perplexity": None, "auc": None,
                            "logloss": None}) + "\n")
PY
"$dptrain" report "$scratch/log" -o "$scratch/report.html" || { echo "FAIL: report" >&2; exit 1; }
echo '<!DOCTYPE html><html><body></body></html>' >"$scratch/blank.html"

# shot NAME HTML: NAME.png and NAME.err (the browser's log).
shot() {
  timeout 120 "$browser" --headless --disable-gpu --no-sandbox --enable-logging=stderr --v=0 \
    --user-data-dir="$scratch/profile-$1" --screenshot="$scratch/$1.png" --window-size=1200,2000 \
    "file://$2" >"$scratch/$1.out" 2>"$scratch/$1.err"
}
shot blank "$scratch/blank.html" || fail "chromium on a blank page: $(tail -5 "$scratch/blank.err")"
shot report "$scratch/report.html" || fail "chromium on the report: $(tail -5 "$scratch/report.err")"
[ -s "$scratch/report.png" ] || { fail "no screenshot"; exit 1; }

# Console messages (a script error, a resource refused) are logged as CONSOLE lines.
if grep -E 'CONSOLE|Failed to load resource|net::ERR' "$scratch/report.err"; then
  fail "the browser's console is not quiet"
fi
# Pixels: the decompressed rows of the screenshot hold many bytes other than 0 and 255 (filter
# bytes and white are all a blank page has); and the PNG is larger than the blank page's.
"$python" - "$scratch/report.png" "$scratch/blank.png" <<'PY' || fail "a blank screenshot"
import struct, sys, zlib
def inked(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    return sum(1 for b in raw if b not in (0, 255)), len(data)
ink, size = inked(sys.argv[1])
blank_ink, blank_size = inked(sys.argv[2])
print("report: %d inked bytes, %d bytes; blank: %d, %d" % (ink, size, blank_ink, blank_size))
assert ink > 10000 and ink > 10 * blank_ink and size > 2 * blank_size
PY

[ "$failures" -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "report_render: all passed"
