# Sourced by scripts/test.sh and the lanes it calls: `stage NAME COMMAND...` runs COMMAND, prints
# "== NAME: N s" and appends "NAME<TAB>N" to $GPT2LN_STAGE_LOG (when set), so that test.sh can
# end with a table of every stage's seconds. A failing COMMAND is logged as "NAME (failed)" and
# its exit status returned. COMMAND runs in a subshell with `set -e` in force (in `cmd || ...`
# bash would ignore -e inside a shell function), so a function's first failing line fails it.
stage() {
  local name=$1 t0=$SECONDS rc had_e=0
  shift
  [[ $- == *e* ]] && had_e=1
  echo "== $name"
  set +e
  (set -e; "$@")
  rc=$?
  [ "$had_e" = 0 ] || set -e
  local took=$((SECONDS - t0))
  [ "$rc" = 0 ] || name="$name (failed)"
  echo "== $name: $took s"
  if [ -n "${GPT2LN_STAGE_LOG:-}" ]; then printf '%s\t%s\n' "$name" "$took" >>"$GPT2LN_STAGE_LOG"; fi
  return "$rc"
}
