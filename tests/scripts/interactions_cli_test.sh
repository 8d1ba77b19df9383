#!/usr/bin/env bash
# dptrain data as a user meets it: convert's one-line errors naming file:line (exit non-zero,
# no shard left), a converted file read back with `data info --dump`, a pattern matching nothing
# and fewer shards than ranks (record ranges), gzip text and NumPy arrays converted, synth's determinism and planted AUC, and `data debian` on a
# hand-written package list.
# Usage: interactions_cli_test.sh <dptrain> <scratch dir>
set -uo pipefail
dptrain=$1 scratch=$2
export OPENBLAS_NUM_THREADS=1
rm -rf "$scratch" && mkdir -p "$scratch"
cd "$scratch" || exit 1
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# 1. convert: bad lines, each one line on stderr naming the file and line, exit 1.
expect_line_error() { # <name> <text> <expected stderr regex>
  printf "$2" >"$1"
  "$dptrain" data convert --input "$1" --out bad --dense 2 --sparse 2 --table-size 10 \
    >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 1 ] || fail "$1: exit $rc, want 1"
  [ "$(wc -l <err.txt)" -eq 1 ] || fail "$1: stderr is not one line: $(cat err.txt)"
  grep -Eq "$3" err.txt || fail "$1: stderr '$(cat err.txt)' lacks /$3/"
  [ -z "$(ls bad 2>/dev/null)" ] || fail "$1: files left in bad/: $(ls bad)"
}
expect_line_error few.tsv '1\t1\t2\ta\tb\n0\t1\t2\ta\n' \
  '^dptrain data convert: bad file format: few.tsv:2: 4 tab-separated fields, want 5'
expect_line_error label.tsv '1\t1\t2\ta\tb\n1\t1\t2\ta\tb\nyes\t1\t2\ta\tb\n' \
  "^dptrain data convert: bad file format: label.tsv:3: label 'yes' is not 0 or 1$"
expect_line_error dense.tsv '0\t1\tabc\ta\tb\n' \
  "^dptrain data convert: bad file format: dense.tsv:1: dense feature 2: 'abc' is not a number$"
"$dptrain" data convert --input missing.tsv --out bad 2>err.txt
[ $? -eq 1 ] && grep -q "missing.tsv: cannot open" err.txt || fail "missing input: $(cat err.txt)"
"$dptrain" data convert --out bad --table-size 1,2 </dev/null 2>err.txt
[ $? -eq 2 ] || fail "--table-size 1,2 should be a usage error"

# 2. convert and read back: label, log(1 + x) of the dense values, hashed ids (table of 2: any
# value is id 1, empty id 0), round-robin over 2 shards.
printf '1\t3\t\ta\t\n0\t0\t-5\t\tzz\n1\t7\t1\tq\tq\n' | "$dptrain" data convert --out conv \
  --dense 2 --sparse 2 --table-size 2 --shards 2 >out.txt 2>err.txt ||
  fail "convert failed: $(cat err.txt)"
grep -q "^converted 3 records (2 dense, 2 sparse) from 1 input into 2 shards conv/shard-\*.bin" \
  out.txt || fail "convert report: $(cat out.txt)"
"$dptrain" data info 'conv/shard-*.bin' --dump 10 >info.txt 2>err.txt || fail "info: $(cat err.txt)"
want=$'shards: 2, records: 3, 2 dense, 2 sparse, table sizes: 2,2
shard 0: conv/shard-00000.bin, 2 records, rank 0
shard 1: conv/shard-00001.bin, 1 records, rank 0
rank 0 of 1: 2 shards, 3 records, 0.6667 positive
1 1.38629436 0 | 1 0
1 2.07944155 0.693147182 | 1 1
0 0 0 | 0 1'
[ "$(cat info.txt)" = "$want" ] || fail "info --dump: got
$(cat info.txt)"
"$dptrain" data info 'conv/shard-*.bin' --world 2 --rank 1 >info.txt 2>&1 &&
  grep -q "^rank 1 of 2: 1 shards, 1 records" info.txt || fail "rank 1 of 2: $(cat info.txt)"

# 3. Patterns: nothing matched; fewer shards than ranks.
"$dptrain" data info 'conv/none-*.bin' 2>err.txt
[ $? -eq 1 ] && grep -q "conv/none-\*.bin: no shard file matches the pattern" err.txt ||
  fail "no match: $(cat err.txt)"
# Fewer files than ranks: record ranges (3 records, 3 ranks: one each); fewer records: refused.
"$dptrain" data info 'conv/shard-*.bin' --world 3 --rank 2 --dump 1 >info.txt 2>err.txt ||
  fail "fewer shards than ranks: $(cat err.txt)"
want=$'shards: 2, records: 3, 2 dense, 2 sparse, table sizes: 2,2
shard 0: conv/shard-00000.bin, 2 records, ranks 0-1
shard 1: conv/shard-00001.bin, 1 records, rank 2
rank 2 of 3: 1 shards, 1 records, 0.0000 positive
0 0 0 | 0 1'
[ "$(cat info.txt)" = "$want" ] || fail "record ranges: got
$(cat info.txt)"
"$dptrain" data info 'conv/shard-*.bin' --world 4 --rank 3 2>err.txt
[ $? -eq 1 ] && grep -q "conv/shard-\*.bin: 3 records for 4 ranks" err.txt ||
  fail "fewer records than ranks: $(cat err.txt)"

# 3b. gzip input (Criteo's day_N.gz) gives the same shards as the plain text; a truncated
# .gz is an error naming the file, with no shard left behind.
printf '1\t3\t\ta\t\n0\t0\t-5\t\tzz\n1\t7\t1\tq\tq\n' | gzip -c >day.gz
"$dptrain" data convert --input day.gz --out convgz --dense 2 --sparse 2 --table-size 2 \
  --shards 2 >/dev/null 2>err.txt || fail "convert .gz: $(cat err.txt)"
for f in shard-00000.bin shard-00001.bin; do
  cmp -s "conv/$f" "convgz/$f" || fail "gzip input: $f differs from the plain text's"
done
seq 1 3000 | awk '{ printf "%d\t%d\t%d\tv%d\tw%d\n", $1 % 2, $1, $1 * 7, $1, $1 % 13 }' |
  gzip -c | head -c 4000 >cut.gz
"$dptrain" data convert --input cut.gz --out convcut --dense 2 --sparse 2 --table-size 9 \
  >/dev/null 2>err.txt
[ $? -eq 1 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "cut.gz: read failed" err.txt ||
  fail "truncated .gz: $(cat err.txt)"
[ -z "$(ls convcut 2>/dev/null)" ] || fail "truncated .gz left files: $(ls convcut)"

# 3c. NumPy arrays as TorchRec writes them: the records of 2 above as float32/int32 arrays
# give the same shard bytes; ids are taken mod the table size, never negative.
/usr/bin/python3 - <<'PY' || fail "writing .npy files"
import math, struct
def npy(path, descr, shape, fmt, values):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
d = [math.log1p(3), 0, 0, 0, math.log1p(7), math.log1p(1)]
npy("d.npy", "<f4", "(3, 2)", "f", d)
npy("s.npy", "<i4", "(3, 2)", "i", [1, 0, 0, 1, 1, 1])
npy("l.npy", "<i4", "(3, 1)", "i", [1, 0, 1])
npy("neg.npy", "<i4", "(3, 2)", "i", [-1, 7, -12, 0, 2147483647, -2147483648])
npy("l3.npy", "<i4", "(3,)", "i", [1, 2, 0])
npy("f.npy", "<f4", "(3, 2)", "f", [0.5] * 6)
PY
"$dptrain" data npy --dense d.npy --sparse s.npy --labels l.npy --out convnpy --table-size 2 \
  --shards 2 >out.txt 2>err.txt || fail "data npy: $(cat err.txt)"
grep -q "^converted 3 rows into 2 shards convnpy/shard-\*.bin" out.txt || fail "npy: $(cat out.txt)"
for f in shard-00000.bin shard-00001.bin; do
  cmp -s "conv/$f" "convnpy/$f" || fail ".npy input: $f differs from the text's"
done
"$dptrain" data npy --sparse neg.npy --labels l.npy --out negnpy --table-size 5 >/dev/null \
  2>err.txt || fail "data npy (no dense): $(cat err.txt)"
"$dptrain" data info 'negnpy/shard-*.bin' --dump 3 >info.txt 2>&1
[ "$(grep '|' info.txt | tr '\n' ';')" = "1 | 4 2;0 | 3 0;1 | 2 2;" ] ||
  fail "npy ids mod 5: $(cat info.txt)"
"$dptrain" data npy --sparse s.npy --labels l3.npy --out bad 2>err.txt
[ $? -eq 1 ] && grep -q "l3.npy: row 1: label 2 is not 0 or 1" err.txt ||
  fail "npy bad label: $(cat err.txt)"
"$dptrain" data npy --sparse f.npy --labels l.npy --out bad 2>err.txt
[ $? -eq 1 ] && grep -q "f.npy: ids and labels must be integers" err.txt ||
  fail "npy float ids: $(cat err.txt)"
head -c 140 s.npy >short.npy
"$dptrain" data npy --sparse short.npy --labels l.npy --out bad 2>err.txt
[ $? -eq 1 ] && grep -q "short.npy: 140 bytes, the header's shape \[3, 2\] needs 152" err.txt ||
  fail "npy truncated: $(cat err.txt)"
[ -z "$(ls bad 2>/dev/null)" ] || fail "npy errors left files: $(ls bad)"

# 4. A truncated shard: one line naming the file.
cp conv/shard-00000.bin trunc-0.bin && truncate -s -2 trunc-0.bin
"$dptrain" data info 'trunc-*.bin' 2>err.txt
[ $? -eq 1 ] && [ "$(wc -l <err.txt)" -eq 1 ] && grep -q "trunc-0.bin: truncated" err.txt ||
  fail "truncated shard: $(cat err.txt)"

# 5. synth: the same seed gives the same files, the planted AUC is reported and above 0.6.
"$dptrain" data synth --out syn1 --samples 20000 --rows 10000 --shards 2 >syn1.txt 2>err.txt ||
  fail "synth failed: $(cat err.txt)"
"$dptrain" data synth --out syn2 --samples 20000 --rows 1e4 --shards 2 >syn2.txt 2>&1
for f in synth-00000.bin synth-00001.bin synth-00000.prob synth-00001.prob; do
  cmp -s "syn1/$f" "syn2/$f" || fail "synth is not deterministic: $f"
done
[ "$(stat -c %s syn1/synth-00000.prob)" -eq $((10000 * 4)) ] || fail "prob file size"
auc=$(sed -n 's/^planted model: AUC \([0-9.]*\), .*/\1/p' syn1.txt)
awk -v a="$auc" 'BEGIN { exit !(a > 0.6 && a < 1) }' || fail "planted AUC '$auc': $(cat syn1.txt)"
"$dptrain" data synth --out syn3 --samples 2000 --rows 10000 --seed 1 >/dev/null 2>&1
cmp -s syn1/synth-00000.bin syn3/synth-00000.bin && fail "another seed gave the same shard"
"$dptrain" data info 'syn1/synth-*.bin' >info.txt &&
  grep -q "^shards: 2, records: 20000, 4 dense, 8 sparse, table sizes: 10000,10000,10000" info.txt ||
  fail "synth shards: $(cat info.txt)"

# 6. debian: a hand-written package list. Ids by name: a 0, b 1, c 2, d 3, e 4, f 5.
# Edges: a->b (version dropped), a->c (first alternative), a->d (Recommends), b->c, b->d
# (continuation line); dropped: libc6 and virtual-thing (no stanza), d->d (self).
cat >Packages <<'EOF'
Package: a
Version: 1.0
Depends: b (>= 1.0), c | d, libc6:any (>= 2)
Recommends: d

Package: b
Depends: c
 , d [amd64]
Description: b
 Depends: x

Package: c
Pre-Depends: a

Package: d
Depends: virtual-thing, d

Package: e

Package: f
EOF
"$dptrain" data debian --packages Packages --out deb --val-fraction 0 --negatives 1 >deb.txt \
  2>err.txt || fail "debian failed: $(cat err.txt)"
grep -q "^packages: 6 (stanzas 6), dependency clauses: 8$" deb.txt || fail "debian: $(cat deb.txt)"
grep -q "^edges: 5 (dropped: 2 to names without a stanza, 1 self, 0 repeated)$" deb.txt ||
  fail "debian edges: $(cat deb.txt)"
[ "$(tr '\n' ' ' <deb/packages.txt)" = "a b c d e f " ] || fail "packages.txt: $(cat deb/packages.txt)"
"$dptrain" data info 'deb/train-*.bin' --dump 100 >info.txt 2>&1 || fail "info train: $(cat info.txt)"
[ "$(grep '^1 |' info.txt | tr '\n' ';')" = "1 | 0 1;1 | 0 2;1 | 0 3;1 | 1 2;1 | 1 3;" ] ||
  fail "debian positives: $(cat info.txt)"
# negatives: never an edge, never the source itself
while read -r label bar u v; do
  [ "$label" = 0 ] || continue
  case "$u $v" in "0 1" | "0 2" | "0 3" | "1 2" | "1 3") fail "negative $u $v is an edge" ;; esac
  [ "$u" != "$v" ] || fail "negative $u $v is a self edge"
done < <(grep '^[01] |' info.txt)
grep -q "^shards: 1, records: [0-9]*, 0 dense, 2 sparse, table sizes: 6,6$" info.txt ||
  fail "debian layout: $(cat info.txt)"
# held out: train + val positives are the 5 edges; rank-* holds each val source's targets
# first, then non-edges; the same run again writes the same files.
apt_text=$(cat Packages)
"$dptrain" data debian --out deb2 --val-fraction 0.5 --rank-negatives 3 <Packages >deb2.txt \
  2>err.txt || fail "debian (stdin) failed: $(cat err.txt)"
"$dptrain" data debian --out deb3 --val-fraction 0.5 --rank-negatives 3 <<<"$apt_text" >/dev/null
for f in train-00000.bin val-00000.bin rank-00000.bin; do
  cmp -s "deb2/$f" "deb3/$f" || fail "debian is not deterministic: $f"
done
ntrain=$(sed -n 's/^split: \([0-9]*\) train, \([0-9]*\) validation.*/\1/p' deb2.txt)
nval=$(sed -n 's/^split: \([0-9]*\) train, \([0-9]*\) validation.*/\2/p' deb2.txt)
[ $((ntrain + nval)) -eq 5 ] || fail "split: $(cat deb2.txt)"
"$dptrain" data info 'deb2/val-*.bin' --dump 100 >val.txt 2>&1
[ "$(grep -c '^1 |' val.txt)" -eq "$nval" ] || fail "val positives: $(cat val.txt)"
"$dptrain" data info 'deb2/rank-*.bin' --dump 100 >rank.txt 2>&1
[ "$(grep -c '^1 |' rank.txt)" -eq "$nval" ] || fail "rank positives: $(cat rank.txt)"
"$dptrain" data debian --out deb4 </dev/null 2>err.txt
[ $? -eq 1 ] && grep -q "0 package stanzas" err.txt || fail "empty input: $(cat err.txt)"

# 7. usage
"$dptrain" data 2>/dev/null
[ $? -eq 2 ] || fail "dptrain data without a subcommand should exit 2"
"$dptrain" data convert --bogus 2>/dev/null
[ $? -eq 2 ] || fail "unknown option should exit 2"
"$dptrain" help | grep -q "^  data " || fail "dptrain help lacks data"

if [ $failures -ne 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "interactions_cli: all passed"
