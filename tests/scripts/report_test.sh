#!/usr/bin/env bash
# dptrain report: the HTML of a short real run (one <svg> per chart, the model's layers, axis
# labels around the losses, the trace's table, no script, nothing loaded), of hand-written logs
# (skipped and rolled back steps, nulls, one step, no evals, a perplexity, 200000 steps in a
# bounded file), and the refusals (exit 1 or 2, a message, no file left behind).
# Usage: report_test.sh <dptrain> <scratch dir>
set -uo pipefail
dptrain=$1 scratch=$2
python=/usr/bin/python3
rm -rf "$scratch" && mkdir -p "$scratch"
export OPENBLAS_NUM_THREADS=1 POCL_MAX_PTHREAD_COUNT=1
failures=0
source "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

svgs() { grep -o '<svg' "$1" | wc -l; }

# 1. A real run of 8 steps: the report's charts, settings, axis labels and trace table.
make_idx "$scratch/data" train 300
make_idx "$scratch/data" t10k 100
run="$scratch/run"
mkdir -p "$run" # --trace's directory must exist when the run starts
"$dptrain" train --data "$scratch/data" --model mlp --global-batch 32 --max-steps 8 --quiet \
  --log-dir "$run" --trace "$run/trace.json" >/dev/null 2>"$scratch/err" || fail "train --log-dir: $(cat "$scratch/err")"
if "$dptrain" report "$run" 2>"$scratch/err"; then
  html="$run/report.html"
  [ -s "$html" ] || fail "no $html"
  [ "$(svgs "$html")" -eq 5 ] || fail "$(svgs "$html") charts, not 5"
  ! grep -qi '<script' "$html" || fail "a script in the report"
  ! grep -qiE 'src=|href=|url\(|@import|<link' "$html" || fail "the report loads a resource"
  ! grep -q 'no data' "$html" || fail "a chart without data in a run with evals"
  # settings.json describes the mlp by its layers (it holds no model name) and says sgd.
  grep -q '<td>model.layers\[1\].kind</td><td>linear</td>' "$html" &&
    grep -q '<td>optimizer.kind</td><td>sgd</td>' "$html" || fail "the settings' model is not in the table"
  [ ! -e "$html.tmp" ] || fail "the temporary is left"
  grep -q '<h2>Trace: trace.json</h2>' "$html" && grep -q '<td>replica 0' "$html" ||
    fail "no per-replica table of the trace"
  # The loss chart's y tick labels bracket the steps' losses.
  "$python" - "$run" "$html" <<'PY' || fail "loss axis labels"
import json, re, sys
d, html = sys.argv[1], open(sys.argv[2]).read()
losses = [json.loads(l)["loss"] for l in open(d + "/steps.jsonl")]
chart = html[html.index("<svg"):html.index("</svg>")]
assert "<title>Loss</title>" in chart, chart[:200]
ys = [float(t) for t in re.findall(r'class="tick" x="64" y="[0-9.]+" text-anchor="end">([-0-9.e+]+)<', chart)]
assert len(ys) >= 2, ys
assert min(ys) <= min(losses) and max(ys) >= max(losses), (ys, losses)
assert max(ys) - min(ys) <= 10 * (max(losses) - min(losses)) + 1, (ys, losses)
PY
  echo "ok: report of a real run"
else
  fail "report of a real run: $(cat "$scratch/err")"
fi
"$dptrain" report "$run" -o "$scratch/other.html" 2>"$scratch/err" && [ -s "$scratch/other.html" ] ||
  fail "report -o: $(cat "$scratch/err")"

# 2. Hand-written logs: skipped and rolled back steps, nulls, a perplexity; one step; no evals.
log="$scratch/marks"
mkdir -p "$log"
echo '{"model": {"kind": "x<y>&\"z\""}, "replicas": 2, "list": [1, 2]}' >"$log/settings.json"
"$python" - "$log" <<'PY'
import json, sys
d = sys.argv[1]
with open(d + "/steps.jsonl", "w") as f:
    for i in range(1, 5001):
        f.write(json.dumps({"step": i, "epoch": 0, "loss": None if i % 1000 == 7 else 3 / i ** 0.3,
                            "lr": 0.1, "grad_norm": None, "samples_per_sec": 1000 + i % 17,
                            "seconds": 0.01, "compute_seconds": 0.008, "exchange_seconds": 0.002,
                            "exposed_seconds": None if i == 10 else 0.001,
                            "skipped": i == 1007, "rolled_back": i == 2500}) + "\n")
with open(d + "/evals.jsonl", "w") as f:
    for e in range(3):
        f.write(json.dumps({"epoch": e, "step": 1000 * (e + 1), "train_loss": 1, "loss": 1.5 - e / 10,
                            "accuracy": None, "perplexity": 4.0 - e, "auc": None, "logloss": None}) + "\n")
PY
if "$dptrain" report "$log" 2>"$scratch/err"; then
  html="$log/report.html"
  [ "$(svgs "$html")" -eq 6 ] || fail "marks: $(svgs "$html") charts, not 6 (perplexity)"
  grep -q 'x&lt;y&gt;&amp;&quot;z&quot;' "$html" || fail "a setting not escaped"
  grep -q '<td>list\[1\]</td><td>2</td>' "$html" || fail "an array setting"
  grep -q 'skipped' "$html" && grep -q 'rolled back' "$html" || fail "no marks' legend"
  grep -q '>no data<' "$html" || fail "accuracy: all null, no 'no data'"
  points=$(grep -o '<polyline[^>]*' "$html" | head -1 | grep -o ',' | wc -l)
  [ "$points" -le 2000 ] || fail "$points points in a line"
  [ "$(stat -c %s "$html")" -lt 400000 ] || fail "a report of $(stat -c %s "$html") bytes"
  echo "ok: report with marks, nulls and a perplexity"
else
  fail "report with marks: $(cat "$scratch/err")"
fi
# A long run: every line of every chart decimated, so the file stays small.
long="$scratch/long"
mkdir -p "$long"
"$python" - "$long/steps.jsonl" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(1, 200001):
        f.write('{"step":%d,"epoch":0,"loss":%g,"lr":0.01,"grad_norm":null,"samples_per_sec":%d,'
                '"seconds":0.01,"compute_seconds":0.008,"exchange_seconds":0.002,'
                '"exposed_seconds":0.001,"skipped":false,"rolled_back":false}\n'
                % (i, 1 + 1 / i, 1000 + i % 13))
PY
if "$dptrain" report "$long" 2>"$scratch/err"; then
  size=$(stat -c %s "$long/report.html")
  most=$(grep -o '<polyline[^>]*' "$long/report.html" | awk -F, '{ print NF - 1 }' | sort -n | tail -1)
  [ "$size" -lt 500000 ] && [ "$most" -le 2000 ] || fail "200000 steps: $size bytes, $most points"
  echo "ok: a report of 200000 steps: $size bytes, at most $most points a line"
else
  fail "report of 200000 steps: $(cat "$scratch/err")"
fi
one="$scratch/one"
mkdir -p "$one"
echo '{"step":1,"epoch":0,"loss":2.5,"lr":0.1,"grad_norm":null,"samples_per_sec":10,"seconds":1,"compute_seconds":0.5,"exchange_seconds":0,"exposed_seconds":0,"skipped":false,"rolled_back":false}' >"$one/steps.jsonl"
if "$dptrain" report "$one" 2>"$scratch/err"; then
  [ "$(svgs "$one/report.html")" -eq 5 ] || fail "one step: not 5 charts"
  grep -q '<circle' "$one/report.html" || fail "one step: no dot"
  grep -q 'no settings.json' "$one/report.html" || fail "one step: no word on the settings"
  echo "ok: report of one step without evals"
else
  fail "report of one step: $(cat "$scratch/err")"
fi

# 3. Refusals: exit 1 (2 for usage), a message, no report file.
code() { "$dptrain" report "$@" >/dev/null 2>&1; echo $?; }
refused "missing DIR" "no such directory" report "$scratch/absent"
[ "$(code "$scratch/absent")" -eq 1 ] || fail "missing DIR: not exit 1"
mkdir -p "$scratch/empty"
refused "no steps.jsonl" "steps.jsonl" report "$scratch/empty"
[ "$(code "$scratch/empty")" -eq 1 ] && [ ! -e "$scratch/empty/report.html" ] ||
  fail "no steps.jsonl: not exit 1, or a file left"
bad="$scratch/bad"
mkdir -p "$bad"
cp "$one/steps.jsonl" "$bad/steps.jsonl"
echo '{"step":2,"loss":' >>"$bad/steps.jsonl"
refused "malformed line" "steps.jsonl:2:" report "$bad"
[ "$(code "$bad")" -eq 1 ] && [ ! -e "$bad/report.html" ] && [ ! -e "$bad/report.html.tmp" ] ||
  fail "malformed line: not exit 1, or a file left"
cp "$one/steps.jsonl" "$bad/steps.jsonl"
echo '[1,' >"$bad/evals.jsonl"
refused "malformed evals" "evals.jsonl:1:" report "$bad"
rm "$bad/evals.jsonl"
refused "unwritable output" "$scratch/no/such/dir/r.html" report "$bad" -o "$scratch/no/such/dir/r.html"
[ "$(code "$bad" -o "$scratch/no/such/dir/r.html")" -eq 1 ] || fail "unwritable output: not exit 1"
[ ! -e "$bad/report.html" ] || fail "unwritable output: a file in DIR"
refused "no DIR" "DIR is required" report
[ "$(code)" -eq 2 ] || fail "no DIR: not exit 2"
[ "$(code "$bad" "$one")" -eq 2 ] || fail "two DIRs: not exit 2"
[ "$(code "$bad" --bogus)" -eq 2 ] || fail "an unknown option: not exit 2"
[ "$(code "$bad" -o)" -eq 2 ] || fail "-o without a value: not exit 2"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "report: all passed"
