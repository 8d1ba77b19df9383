#!/usr/bin/env bash
# House rules of the source tree (ctest `house`), so the layering of docs/architecture.md stays
# true as files move and grow, instead of being found out by a review:
#   1. no cycle between units (a .c with the same-named .h beside it; a lone header is a unit)
#      of base/ backends/ collectives/ core/ include/ tools/ bench/ examples/, through #include
#      or through a global symbol one unit uses and another defines (nm on the built objects);
#   2. no upward include or call: programs (tools/ bench/ examples/) > core/ > collectives/ >
#      backends/ > base/, and inside collectives/ api/ > algorithms/ > engine/ > transports/ >
#      common/; include/dptrain/ is anyone's, but base/ includes only the leaf public headers
#      (status.h, fingerprint.h: they include nothing of ours but export.h);
#   3. every .c/.h there and in tests/ formats to itself with the repo's .clang-format;
#   4. no function in core/ over 60 lines (from the line of its name to its closing brace).
# Known findings, each with its reason, are listed in tools/house_exceptions.txt; an exception
# that matches nothing any more is a finding too, so the list only shrinks honestly.
#
# Usage: tools/check_house.sh [--build DIR] [SOURCE_ROOT]
#   DIR: a configured and built tree (its CMakeFiles/dptrain_static.dir and the tools/, bench/,
#   examples/ objects give the call graph); without it only #include edges are checked.
#   SOURCE_ROOT defaults to the repository this script is in.
# Exit: 0 clean, 1 findings, 2 usage, 77 a needed program is missing (ctest: skipped).
set -uo pipefail

LIMIT=60                                   # longest function allowed in core/, in lines
LIB_DIRS=(base backends collectives core include tools bench examples)
FORMAT_DIRS=("${LIB_DIRS[@]}" tests)

usage() { sed -n '16,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
skip() { echo "house: skipped: $*" >&2; exit 77; }

build="" root=""
while [ $# -gt 0 ]; do
  case $1 in
    --build) [ $# -ge 2 ] || usage; build=$2; shift 2 ;;
    --build=*) build=${1#--build=}; shift ;;
    -h | --help) usage ;;
    -*) usage ;;
    *) [ -z "$root" ] || usage; root=$1; shift ;;
  esac
done
[ -n "$root" ] || root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=$(cd "$root" 2>/dev/null && pwd) || { echo "house: no such directory: $root" >&2; exit 2; }
build_arg=$build
[ -z "$build" ] || build=$(cd "$build" 2>/dev/null && pwd) || build=""

# ---- programs ---------------------------------------------------------------------------------
# Exuberant ctags has no end: field; an older clang-format formats differently from the one the
# tree was formatted with, so say which one ran when a file is reported.
command -v ctags >/dev/null 2>&1 || skip "ctags not found (Debian: universal-ctags)"
ctags --version 2>/dev/null | grep -q 'Universal Ctags' ||
  skip "ctags is not universal-ctags (Debian: universal-ctags)"
clang_format=${CLANG_FORMAT:-}
if [ -z "$clang_format" ]; then
  for c in clang-format clang-format-14; do
    command -v "$c" >/dev/null 2>&1 && { clang_format=$c; break; }
  done
fi
[ -n "$clang_format" ] || skip "clang-format not found (Debian: clang-format)"
if [ -n "$build" ]; then
  command -v nm >/dev/null 2>&1 || skip "nm not found (Debian: binutils)"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/house.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C                            # one sort order for keys, findings and exceptions

# Awk functions shared by the passes (mawk: no gawk extensions).
AWK_LIB='
# the layer of a path: programs 5, core 4, collectives 3 (its folders api 3.5 down to common
# 3.1), backends 2, base 1, include 0
function layer(p,   t) {
  t = p; sub(/\/.*/, "", t)
  if (t == "tools" || t == "bench" || t == "examples") return 5
  if (t == "core") return 4
  if (p ~ /^collectives\/api\//) return 3.5
  if (p ~ /^collectives\/algorithms\//) return 3.4
  if (p ~ /^collectives\/engine\//) return 3.3
  if (p ~ /^collectives\/transports\//) return 3.2
  if (p ~ /^collectives\/common\//) return 3.1
  if (t == "collectives") return 3
  if (t == "backends") return 2
  if (t == "base") return 1
  return 0
}
function top(p,   t) { t = p; sub(/\/.*/, "", t); return t }
# a path with "." and "dir/.." taken out
function norm(p,   n, i, k, part, out) {
  n = split(p, part, "/"); k = 0
  for (i = 1; i <= n; i++) {
    if (part[i] == "." || part[i] == "") continue
    if (part[i] == ".." && k > 0 && out[k] != "..") { k--; continue }
    out[++k] = part[i]
  }
  p = ""
  for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
  return p
}
# sorts words of a space-separated string
function sortwords(s,   n, w, i, j, t, out) {
  n = split(s, w, " ")
  for (i = 2; i <= n; i++) {
    t = w[i]
    for (j = i - 1; j >= 1 && w[j] > t; j--) w[j + 1] = w[j]
    w[j + 1] = t
  }
  out = ""
  for (i = 1; i <= n; i++) out = out (i > 1 ? " " : "") w[i]
  return out
}
'

# ---- the files --------------------------------------------------------------------------------
# All .c/.h of the checked folders, minus generated ones (a "DO NOT EDIT" or "@generated" in
# their first lines: nobody formats or splits what a generator writes).
list_files() {
  local d dirs=()
  for d in "${FORMAT_DIRS[@]}"; do [ -d "$root/$d" ] && dirs+=("$d"); done
  [ ${#dirs[@]} -gt 0 ] || return 0
  (cd "$root" && find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' \) -print) |
    grep -v '/CMakeFiles/' | sort >"$tmp/found"
  # shellcheck disable=SC2016
  (cd "$root" && xargs -r awk 'FNR > 5 { nextfile }
       tolower($0) ~ /do not edit|@generated/ { print FILENAME; nextfile }' <"$tmp/found") |
    sort -u >"$tmp/generated"
  comm -23 "$tmp/found" "$tmp/generated" >"$tmp/all"
  grep -v '^tests/' "$tmp/all" >"$tmp/lib" || true
}

# ---- check 1a and 2: includes ----------------------------------------------------------------
# Edges "from_unit TAB to_unit TAB included_file TAB inc" to $tmp/edges, and an upward finding
# per file that includes a header of a higher layer. "x" resolves against the including file's
# folder, the root and include/ (the include path of every target); <x> against include/ and
# the root. What resolves to no file of the tree (system, generated headers) is no edge.
scan_includes() {
  (cd "$root" && awk -v findings="$tmp/findings" "$AWK_LIB"'
    function unit(f,   c) {
      if (f ~ /\.h$/) { c = substr(f, 1, length(f) - 2) ".c"; if (c in have) return c }
      return f
    }
    function resolve(from, name, delim,   dir, c) {
      dir = from; sub(/\/[^\/]*$/, "", dir)
      if (delim == "\"") { c = norm(dir "/" name); if (c in have) return c }
      c = norm(name); if (delim == "\"" && (c in have)) return c
      c = norm("include/" name); if (c in have) return c
      c = norm(name); if (c in have) return c
      return ""
    }
    # base/ may include base/ and the leaf public headers only; include/ is public otherwise.
    function upward(f, g) {
      if (top(f) == "base" && top(g) != "base")
        return g != "include/dptrain/status.h" && g != "include/dptrain/fingerprint.h"
      if (top(g) == "include") return 0
      return layer(g) > layer(f)
    }
    { have[$0] = 1; files[++n] = $0 }
    END {
      for (i = 1; i <= n; i++) {
        f = files[i]
        while ((getline line < f) > 0) {
          if (line !~ /^[ \t]*#[ \t]*include[ \t]*[<"]/) continue
          if (!match(line, /[<"][^<>"]*[>"]/)) continue
          g = resolve(f, substr(line, RSTART + 1, RLENGTH - 2), substr(line, RSTART, 1))
          if (g == "" || g == f) continue
          if (upward(f, g))
            printf "upward %s -> %s\tupward: %s includes %s\n", f, g, f, g >> findings
          if (unit(f) != unit(g)) printf "%s\t%s\t%s\tinc\n", unit(f), unit(g), g
        }
        close(f)
      }
    }' "$tmp/lib") >>"$tmp/edges"
}

# ---- check 1b: calls, from the objects -------------------------------------------------------
# The static library's objects and the programs' (BUILD/CMakeFiles/dptrain_static.dir/<src>.o,
# BUILD/<dir>/CMakeFiles/<target>.dir/<src>.o for dir tools, bench, examples) mapped back to
# their sources; an edge from the unit that uses a global symbol (U) to each unit defining it.
# Objects whose source is not in the tree are left out: sources generated into BUILD, and
# leftovers of files moved since (CMake never deletes those); a source newer than its object is
# counted and reported, as the graph may then be out of date.
object_list() {
  local dirs=() d
  [ -d "$build/CMakeFiles/dptrain_static.dir" ] && dirs+=("$build/CMakeFiles/dptrain_static.dir")
  for d in tools bench examples; do
    [ -d "$build/$d/CMakeFiles" ] && dirs+=("$build/$d/CMakeFiles")
  done
  [ ${#dirs[@]} -gt 0 ] || return 0
  find "${dirs[@]}" -type f -name '*.c.o' | sort
}

scan_objects() {
  local obj src older=0
  if [ -z "$build_arg" ]; then
    echo "house: no --build DIR: calls not checked (cycles and upward from #include only)"
    partial=1
    return
  fi
  if [ -z "$build" ]; then
    echo "house: no directory $build_arg: calls not checked (cycles and upward from" \
      "#include only)"
    partial=1
    return
  fi
  object_list >"$tmp/objects"
  if [ ! -s "$tmp/objects" ]; then
    echo "house: no objects in $build (not built?): calls not checked (cycles and upward" \
      "from #include only)"
    partial=1
    return
  fi
  # "object TAB source" for the objects whose source is in the tree
  awk -v build="$build/" "$AWK_LIB"'
    FNR == NR { have[$0] = 1; next }
    {
      rel = substr($0, length(build) + 1)
      src = rel
      if (!sub(/^CMakeFiles\/dptrain_static\.dir\//, "", src)) {
        d = rel; sub(/\/.*/, "", d); sub(/^[^\/]*\/CMakeFiles\/[^\/]*\.dir\//, "", src)
        src = d "/" src
      }
      gsub(/__\//, "../", src); sub(/\.o$/, "", src); src = norm(src)
      if (src in have) print $0 "\t" src
    }' "$tmp/lib" "$tmp/objects" >"$tmp/objmap"
  if [ ! -s "$tmp/objmap" ]; then
    echo "house: no object in $build is of a source here: calls not checked (cycles and" \
      "upward from #include only)"
    partial=1
    return
  fi
  while IFS=$'\t' read -r obj src; do
    [ "$root/$src" -nt "$obj" ] && older=$((older + 1))
  done <"$tmp/objmap"
  if [ "$older" -gt 0 ]; then
    echo "house: note: $older sources are newer than their objects in $build: rebuild it for" \
      "an exact call graph"
  fi
  cut -f1 "$tmp/objmap" | xargs nm -A -P 2>/dev/null |
    awk -F'\t' -v map="$tmp/objmap" '
      BEGIN { while ((getline l < map) > 0) { split(l, p, "\t"); src[p[1] ":"] = p[2] } }
      {
        split($0, f, " "); u = src[f[1]]; s = f[2]; t = f[3]
        if (u == "" || s ~ /^\./) next
        if (t == "U" || t == "w" || t == "v") { used[u SUBSEP s] = 1 }
        else if (t ~ /^[ABCDGRSTVWiu]$/) { def[s] = def[s] " " u }
      }
      END {
        for (k in used) {
          split(k, p, SUBSEP); n = split(def[p[2]], d, " ")
          for (i = 1; i <= n; i++) if (d[i] != p[1]) printf "%s\t%s\t%s\tsym\n", p[1], d[i], p[2]
        }
      }' >>"$tmp/edges"
}

# ---- check 1 and 2: the graph ----------------------------------------------------------------
# Strongly connected components of the unit graph (Tarjan); each with more than one unit is a
# finding, printed as a closed walk through all its units with the names on every arrow. A call
# edge from a lower layer up is an upward finding.
check_graph() {
  sort -u "$tmp/edges" | awk -F'\t' "$AWK_LIB"'
    # what makes the edge a -> b: included headers, then symbols; four at most
    function names(a, b,   n, m, w, i, out, shown) {
      out = ""; shown = 0
      n = split(sortwords(inc[a, b]), w, " ")
      for (i = 1; i <= n && shown < 4; i++) out = out (shown++ ? ", " : "") "#include " w[i]
      m = split(sortwords(sym[a, b]), w, " ")
      for (i = 1; i <= m && shown < 4; i++) out = out (shown++ ? ", " : "") w[i]
      if (n + m > shown) out = out ", +" (n + m - shown) " more"
      return out
    }
    function strong(v,   i, w, n) {
      idx[v] = ++counter; low[v] = counter; stk[++sp] = v; onstk[v] = 1
      for (i = 1; i <= deg[v]; i++) {
        w = adj[v, i]
        if (!(w in idx)) { strong(w); if (low[w] < low[v]) low[v] = low[w] }
        else if (onstk[w] && idx[w] < low[v]) low[v] = idx[w]
      }
      if (low[v] == idx[v]) {
        ncomp++; n = 0
        do { w = stk[sp--]; onstk[w] = 0; comp[w] = ncomp; cm[ncomp, ++n] = w } while (w != v)
        csize[ncomp] = n
      }
    }
    # Appends to the walk the shortest path inside component c from s to goal (goal "": to the
    # nearest unit not on the walk yet); returns where it ended.
    function step(s, c, goal,   head, tail, u, i, w, found, n, rev) {
      split("", qd); split("", q); split("", prev)
      head = 1; tail = 1; q[1] = s; qd[s] = 1; found = ""
      while (head <= tail && found == "") {
        u = q[head++]
        for (i = 1; i <= deg[u]; i++) {
          w = adj[u, i]
          if (comp[w] != c) continue
          if (goal != "" && w == goal) { prev[w] = u; found = w; break }
          if (w in qd) continue
          qd[w] = 1; prev[w] = u; q[++tail] = w
          if (goal == "" && !(w in onwalk)) { found = w; break }
        }
      }
      if (found == "") return s
      n = 0
      for (w = found; ; w = prev[w]) { rev[++n] = w; if (prev[w] == s) break }
      for (i = n; i >= 1; i--) {
        walk = walk " -> " rev[i] " (" names(i == n ? s : rev[i + 1], rev[i]) ")"
        if (!(rev[i] in onwalk)) { onwalk[rev[i]] = 1; nwalk++ }
      }
      return found
    }
    {
      a = $1; b = $2
      if (!((a, b) in seen)) { seen[a, b] = 1; adj[a, ++deg[a]] = b }
      node[a] = 1; node[b] = 1
      if ($4 == "inc") inc[a, b] = inc[a, b] " " $3
      else {
        sym[a, b] = sym[a, b] " " $3
        if (layer(b) > layer(a) && !((a, b) in up)) { up[a, b] = 1; ups[++nup] = a SUBSEP b }
      }
    }
    END {
      list = ""; for (v in node) list = list " " v
      n = split(sortwords(list), order, " ")
      for (i = 1; i <= n; i++) if (!(order[i] in idx)) strong(order[i])
      for (c = 1; c <= ncomp; c++) {
        if (csize[c] < 2) continue
        members = ""; for (i = 1; i <= csize[c]; i++) members = members " " cm[c, i]
        members = sortwords(members); split(members, m, " ")
        split("", onwalk); onwalk[m[1]] = 1; nwalk = 1; walk = m[1]; at = m[1]
        while (nwalk < csize[c]) at = step(at, c, "")
        step(at, c, m[1])
        printf "cycle %s\tcycle: %s\n", members, walk
      }
      for (i = 1; i <= nup; i++) {
        split(ups[i], p, SUBSEP)
        printf "upward %s -> %s\tupward: %s calls %s (%s)\n", p[1], p[2], p[1], p[2],
          names(p[1], p[2])
      }
    }' >>"$tmp/findings"
}

# ---- check 3: formatting ---------------------------------------------------------------------
# One clang-format run over every file; it names each file that would change. A clang-format
# that fails for another reason (a .clang-format key it does not know) is a finding, not a pass.
check_format() {
  local rc
  if [ ! -f "$root/.clang-format" ]; then
    echo "house: no $root/.clang-format: formatting not checked"
    return
  fi
  (cd "$root" && xargs "$clang_format" --dry-run --Werror --style=file <"$tmp/all" \
    >"$tmp/format.out" 2>&1)
  rc=$?
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: \(error\|warning\): .*clang-format-violations.*/\1/p' \
    "$tmp/format.out" | sort -u >"$tmp/unformatted"
  if [ $rc -ne 0 ] && [ ! -s "$tmp/unformatted" ]; then
    printf 'unformatted (%s)\tunformatted: %s failed: %s\n' "$clang_format" "$clang_format" \
      "$(grep -m1 . "$tmp/format.out")" >>"$tmp/findings"
  fi
  awk -v cf="$clang_format" '{
    printf "unformatted %s\tunformatted: %s (%s -i %s)\n", $0, $0, cf, $0 }' \
    "$tmp/unformatted" >>"$tmp/findings"
}

# ---- check 4: long functions in core/ --------------------------------------------------------
# universal-ctags gives each function definition its name line and end line; data tables are
# not kind f. Headers are C here (ctags maps .h to C++ by default).
check_long() {
  grep '^core/' "$tmp/all" >"$tmp/core" || return 0
  if ! (cd "$root" && ctags -x --_xformat='%F	%N	%n	%e' --languages=C --langmap=C:.c.h \
    --kinds-C=f -L "$tmp/core" >"$tmp/tags" 2>"$tmp/tags.err"); then
    printf 'long (ctags)\tlong function: ctags failed: %s\n' "$(grep -m1 . "$tmp/tags.err")" \
      >>"$tmp/findings"
    return
  fi
  awk -F'\t' -v limit="$LIMIT" '$4 ~ /^[0-9]+$/ && $4 - $3 + 1 > limit {
    printf "long %s:%s\tlong function: %s:%s is %d lines (over %d, from line %d)\n",
      $1, $2, $1, $2, $4 - $3 + 1, limit, $3 }' "$tmp/tags" >>"$tmp/findings"
}

# ---- exceptions and the report ---------------------------------------------------------------
# Exceptions: "cycle FILE FILE... -- reason" (the component's units, any order), "upward FILE ->
# FILE -- reason", "long core/path.c:function -- reason"; # starts a comment line. Formatting
# has none: clang-format -i fixes it. Findings come out by kind, then sorted.
report() {
  local exceptions="$root/tools/house_exceptions.txt"
  [ -f "$exceptions" ] || { : >"$tmp/no-exceptions"; exceptions="$tmp/no-exceptions"; }
  sort -u "$tmp/findings" |
    awk -F'\t' -v exc="$exceptions" -v nfiles="$(wc -l <"$tmp/all")" -v partial="$partial" \
    "$AWK_LIB"'
    BEGIN {
      while ((getline l < exc) > 0) {
        at = ++ln                          # a backslash at the end goes on on the next line
        while (l ~ /\\$/ && (getline more < exc) > 0) { ln++; sub(/\\$/, "", l); l = l " " more }
        if (l ~ /^[ \t]*(#|$)/) continue
        gsub(/[ \t]+/, " ", l); text[at] = l
        i = index(l, " -- ")
        if (!i || substr(l, i + 4) !~ /[^ \t]/) { bad[at] = "no \" -- reason\""; continue }
        n = split(substr(l, 1, i - 1), w, " "); key = ""
        if (w[1] == "cycle" && n >= 3) {
          s = ""; for (j = 2; j <= n; j++) s = s " " w[j]
          key = "cycle " sortwords(s)
        } else if (w[1] == "upward" && n == 4 && w[3] == "->") key = "upward " w[2] " -> " w[4]
        else if (w[1] == "long" && n == 2 && w[2] ~ /^core\/.+:[A-Za-z_][A-Za-z_0-9]*$/)
          key = "long " w[2]
        else {
          bad[at] = "not \"cycle F F...\", \"upward F -> F\" or \"long core/F.c:function\""
          continue
        }
        if (key in exkey) { bad[at] = "the same as line " exkey[key]; continue }
        exkey[key] = at
      }
    }
    # Without the call graph a cycle may be a part of a listed one, and a listed cycle or
    # upward call may be there all the same: no staleness for those.
    function within(k,   n, w, i, e) {
      n = split(k, w, " ")
      for (e in exkey) {
        if (e !~ /^cycle /) continue
        for (i = 2; i <= n && index(e " ", " " w[i] " "); i++) ;
        if (i > n) return exkey[e]
      }
      return 0
    }
    # whether the cycle exception of line i lies inside a cycle found and not excepted
    function grown(i,   k, e, n, w, j) {
      for (k in exkey) if (exkey[k] == i) e = k
      if (e !~ /^cycle /) return 0
      n = split(e, w, " ")
      for (k in open_cycles) {
        for (j = 2; j <= n && index(k " ", " " w[j] " "); j++) ;
        if (j > n) return 1
      }
      return 0
    }
    {
      if ($1 in exkey) { used[exkey[$1]] = 1; next }
      if (partial && $1 ~ /^cycle / && (e = within($1))) { used[e] = 1; next }
      k = $1; sub(/ .*/, "", k); out[k] = out[k] $2 "\n"; count[k]++; fails++
      if (k == "cycle") open_cycles[$1] = 1
    }
    END {
      printf "%s%s%s%s", out["cycle"], out["upward"], out["unformatted"], out["long"]
      for (i = 1; i <= ln; i++) {
        if (!(i in text)) continue
        if (i in bad) printf "bad exception: line %d: %s (%s)\n", i, text[i], bad[i]
        else if ((i in used) || (partial && text[i] ~ /^[ \t]*(cycle|upward)[ \t]/)) {
          nused++; continue
        } else if (grown(i))
          printf "stale exception: line %d: %s (its units are now part of a larger cycle" \
            " above: list that one, or break it)\n", i, text[i]
        else printf "stale exception: line %d: %s (matches nothing now: remove it)\n", i, text[i]
        fails++; nbad++
      }
      printf "house: %d files, %d cycles, %d upward, %d unformatted, %d long functions", nfiles,
        count["cycle"], count["upward"], count["unformatted"], count["long"]
      printf " (%d exceptions%s)\n", nused, nbad ? ", " nbad " stale or bad" : ""
      exit (fails > 0 ? 1 : 0)
    }'
}

: >"$tmp/edges"
: >"$tmp/findings"
partial=0                                  # 1: no call graph, the graph checks are partial
list_files
[ -s "$tmp/all" ] || { echo "house: no .c/.h files under $root" >&2; exit 2; }
scan_includes
scan_objects
check_graph
check_format
check_long
report
