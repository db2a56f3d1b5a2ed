#!/usr/bin/env bash
# Keep a virtual environment of the repository outside the clone, keyed by a hash of what
# defines it, so that the next clean clone on this machine (CI's case) restores it in
# seconds instead of installing it again.
#
#   bash scripts/venv_cache.sh restore VENV KEY   # VENV absent and an entry for KEY cached:
#                                                 # copy it to VENV (hard links) and relocate it
#   bash scripts/venv_cache.sh save VENV KEY      # cache VENV under KEY (once per key)
#
# The cache lives in $GPT2LN_VENV_CACHE (default ~/.cache/gpt2ln-venvs); GPT2LN_VENV_CACHE=0
# turns it off. A miss (a new machine, a changed key) changes nothing: the caller builds the
# venv as before and saves it. An entry holds no gpt2ln (the editable install points into the
# clone that built it): the callers install gpt2ln into the restored venv, as they always do.
# Restoring hard-links the files (copies them where links cannot be made) and rewrites the
# venv's own path in its scripts (bin/: shebangs, activate) and pyvenv.cfg; pip and uv replace
# files rather than write into them, so the entry is never changed through a link. The two
# newest entries of each venv are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 3 ] || { echo "usage: $0 restore|save VENV KEY" >&2; exit 2; }
action=$1 venv=${2%/} key=$3
[ "${GPT2LN_VENV_CACHE:-}" != 0 ] || exit 0
root=${GPT2LN_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpt2ln-venvs}
name=$(basename "$venv")
entry=$root/$name@$key
here=$PWD/$venv

copy() {  # copy a tree with hard links where the file system allows, else a plain copy
  cp -a --link "$1" "$2" 2>/dev/null || { rm -rf "$2"; cp -a "$1" "$2"; }
}

relocate() {  # relocate DIR FROM TO: rewrite the venv's absolute path in its text files
  local dir=$1 from=$2 to=$3 f
  [ "$from" != "$to" ] || return 0
  for f in "$dir/pyvenv.cfg" "$dir"/bin/*; do
    [ -f "$f" ] && [ ! -L "$f" ] && grep -qIF "$from" "$f" || continue
    sed -i "s#$from#$to#g" "$f"  # a new file, so the cached one behind the link is untouched
  done
}

case $action in
  restore)
    [ -d "$entry" ] || { echo "venv cache: no $name for key ${key:0:12}: building it"; exit 0; }
    [ ! -e "$venv" ] || exit 0  # already there (not a clean clone): the caller checks it
    t0=$SECONDS
    copy "$entry" "$venv"
    relocate "$venv" "$(cat "$entry/.venv-cache-origin")" "$here"
    rm -f "$venv/.venv-cache-origin"
    echo "venv cache: restored $name from $entry in $((SECONDS - t0)) s"
    ;;
  save)
    [ -x "$venv/bin/python" ] || { echo "venv cache: no $venv to save" >&2; exit 1; }
    [ ! -d "$entry" ] || exit 0
    mkdir -p "$root"
    tmp=$root/.tmp-$name-$$
    rm -rf "$tmp"
    copy "$venv" "$tmp"
    # no gpt2ln in the entry: its editable install names the clone that built it
    for site in "$tmp"/lib/python*/site-packages; do
      rm -rf "$site"/gpt2ln-*.dist-info "$site"/__editable__*gpt2ln* "$site"/gpt2ln.egg-link
    done
    echo "$here" >"$tmp/.venv-cache-origin"
    # renamed into place whole: a concurrent run sees the entry complete or not at all
    mv -T "$tmp" "$entry" 2>/dev/null || rm -rf "$tmp"
    # keep the two newest entries of this venv
    ls -1dt "$root/$name"@* 2>/dev/null | tail -n +3 | while read -r old; do rm -rf "$old"; done
    echo "venv cache: saved $name as $entry"
    ;;
  *) echo "usage: $0 restore|save VENV KEY" >&2; exit 2 ;;
esac
