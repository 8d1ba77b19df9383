#!/usr/bin/env bash
# The four views of the option tables agree: every option a command's --help lists is in its
# part of docs/reference.md (and the reverse), in what the bash completion offers after
# `dptrain <command> --`, and in its part of the man page; the completion completes commands,
# files after file options, directories after directory options and the choices an option lists;
# the man page has the commands and the exit statuses; `cmake --install --component tool`
# installs the tool, its completion and its man page. Exit 77 (skipped) when everything else
# passed but the man page was not made (no help2man).
# Usage: cli_docs_test.sh <dptrain> <reference.md> <completion script> <man page> [build dir]
set -uo pipefail
dptrain=$1 reference=$2 completion=$3 man=$4 build=${5:-}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# shellcheck source=/dev/null
source "$completion" || { echo "FAIL: cannot source $completion" >&2; exit 1; }
# complete WORDS...: what _dptrain offers for the last word of `dptrain WORDS...`, one a line.
complete_words() {
  COMP_WORDS=(dptrain "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _dptrain
  printf '%s\n' "${COMPREPLY[@]}"
}
has_man=0
[ -s "$man" ] && has_man=1

# The commands with options: the usage's command lines whose reference part exists.
mapfile -t commands < <("$dptrain" help | sed -n 's/^  \([a-z][a-z ]*[a-z]\)  .*/\1/p' |
  sed 's/ *$//' | while read -r c; do grep -qx "## dptrain $c" "$reference" && echo "$c"; done)
[ ${#commands[@]} -ge 12 ] || fail "only ${#commands[@]} commands with options: ${commands[*]}"
common="--config --print-config --help"

checked=0
for c in "${commands[@]}"; do
  # shellcheck disable=SC2086
  mapfile -t help < <("$dptrain" $c --help | sed -n 's/^  \(--[a-z0-9-]*\).*/\1/p')
  mapfile -t ref < <(awk -v h="## dptrain $c" '$0 == h { on = 1; next } /^## / { on = 0 }
    on' "$reference" | sed -n 's/^- `\(--[a-z0-9-]*\).*/\1/p')
  # shellcheck disable=SC2086
  mapfile -t offered < <(complete_words $c --)
  section=""
  [ $has_man -eq 1 ] && section=$(awk -v h=".SS \"dptrain $c\"" '$0 == h { on = 1; next }
    /^\.S[SH] / { on = 0 } on' "$man")
  declare -A in_help=() in_ref=() in_offered=()
  for o in "${help[@]}"; do in_help[$o]=1; done
  for o in "${ref[@]}"; do in_ref[$o]=1; done
  for o in "${offered[@]}"; do in_offered[$o]=1; done
  for o in "${help[@]}"; do
    checked=$((checked + 1))
    if [[ " $common " != *" $o "* ]]; then
      [ -n "${in_ref[$o]:-}" ] || fail "$c: $o is not in $reference"
      [ $has_man -eq 0 ] || [[ $section == *"${o//-/\\-}"* ]] || fail "$c: $o is not in the man page"
    fi
    [ -n "${in_offered[$o]:-}" ] || fail "$c: the completion does not offer $o"
  done
  for o in "${ref[@]}"; do
    [ -n "${in_help[$o]:-}" ] || fail "$c: $o of $reference is not in --help"
  done
  [ ${#offered[@]} -eq ${#help[@]} ] ||
    fail "$c: the completion offers ${#offered[@]} options, --help lists ${#help[@]}"
  unset in_help in_ref in_offered
done
[ $checked -ge 150 ] || fail "only $checked options checked"
for o in $common; do
  grep -q "^- \`$o" "$reference" || fail "$o is not in $reference"
done

# The completion beyond the option lists.
[ "$(complete_words tr)" = train ] || fail "'dptrain tr' completes to '$(complete_words tr)'"
[ "$(complete_words checkpoint ex)" = export ] || fail "'checkpoint ex' completes wrongly"
[ "$(complete_words train --optimizer '' | tr '\n' ' ')" = "sgd adamw lamb " ] ||
  fail "--optimizer's choices: $(complete_words train --optimizer '')"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli_docs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/sub" && touch "$tmp/data.safetensors"
[ "$(complete_words train --data "$tmp/da")" = "$tmp/data.safetensors" ] ||
  fail "--data does not complete a file: '$(complete_words train --data "$tmp/da")'"
[ "$(complete_words train --data = "$tmp/da")" = "$tmp/data.safetensors" ] ||
  fail "--data= does not complete a file"
[ "$(complete_words train --log-dir "$tmp/")" = "$tmp/sub" ] ||
  fail "--log-dir does not complete directories only: '$(complete_words train --log-dir "$tmp/")'"
[ -z "$(complete_words train --epochs "")" ] || fail "--epochs' value completed"
[ "$(complete_words checkpoint info "$tmp/da")" = "$tmp/data.safetensors" ] ||
  fail "checkpoint info's PATH is not completed"

if [ $has_man -eq 1 ]; then
  for s in NAME SYNOPSIS DESCRIPTION COMMANDS ENVIRONMENT '"EXIT STATUS"'; do
    grep -q "^\.SH $s" "$man" || fail "the man page has no $s section"
  done
  status=$(awk '/^\.SH "EXIT STATUS"/ { on = 1; next } /^\.SH / { on = 0 } on' "$man")
  for code in 0 1 2 69 75 130; do
    grep -qx "\\\\fB$code\\\\fR" <<<"$status" || fail "the man page's EXIT STATUS lacks $code"
  done
  grep -q '^\.SS "dptrain train"' "$man" || fail "the man page lacks dptrain train"
fi

if [ -n "$build" ]; then
  cmake --install "$build" --component tool --prefix "$tmp/prefix" >/dev/null ||
    fail "cmake --install --component tool failed"
  installed=(bin/dptrain share/bash-completion/completions/dptrain)
  [ $has_man -eq 0 ] || installed+=(share/man/man1/dptrain.1)
  for f in "${installed[@]}"; do
    [ -s "$tmp/prefix/$f" ] || fail "the tool component lacks $f"
  done
  [ ! -e "$tmp/prefix/include" ] || fail "the tool component installs the headers"
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "cli_docs: ${#commands[@]} commands, $checked options agree"
[ $has_man -eq 1 ] || { echo "cli_docs: no man page (help2man missing): skipped"; exit 77; }
