#!/usr/bin/env bash
# Fetch the JavaScript the built pages need, so they work with no network:
# MathJax 3 (math) and the ipywidgets HTML manager with RequireJS (widget
# snapshots). They come from the npm registry into book/_vendor/ (git-ignored),
# which _config.yml serves as static files. Without npm, small loader files that
# pull the same libraries from a CDN are written instead (pages then need network).
set -euo pipefail
cd "$(dirname "$0")/.."
MATHJAX=mathjax@3.2.2
WIDGETS=@jupyter-widgets/html-manager@1.0.15
REQUIREJS=requirejs@2.3.8
out=book/_vendor
stamp="$out/.versions"
want="$MATHJAX $WIDGETS $REQUIREJS"

# axe-core, for the accessibility checks of the browser tests only: into .cache/axe
# (git-ignored, not served by the site).
AXE=axe-core@4.14.1
axe_dir=.cache/axe
if [ "$(cat "$axe_dir/.version" 2>/dev/null)" != "$AXE" ]; then
  if command -v npm >/dev/null 2>&1; then
    axe_tmp=$(mktemp -d)
    if (cd "$axe_tmp" && npm pack --silent "$AXE" >/dev/null) && tar xzf "$axe_tmp"/axe-core-*.tgz -C "$axe_tmp"; then
      rm -rf "$axe_dir" && mkdir -p "$axe_dir"
      cp "$axe_tmp/package/axe.min.js" "$axe_tmp/package/LICENSE" "$axe_dir/"
      echo "$AXE" > "$axe_dir/.version"
      echo "fetch_vendor: $AXE is in $axe_dir (for tests/browser)"
    else
      echo "fetch_vendor: could not fetch $AXE: the accessibility tests will skip" >&2
    fi
    rm -rf "$axe_tmp"
  else
    echo "fetch_vendor: npm not found: no axe-core, the accessibility tests will skip" >&2
  fi
fi

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$out" && mkdir -p "$out/mathjax" "$out/widgets"
if command -v npm >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$MATHJAX" "$WIDGETS" "$REQUIREJS" >/dev/null)
  for f in "$tmp"/*.tgz; do mkdir -p "${f%.tgz}" && tar xzf "$f" -C "${f%.tgz}"; done
  cp -r "$tmp"/mathjax-*/package/es5/. "$out/mathjax/"
  rm -rf "$out/mathjax/sre"  # speech-rule engine for screen readers' menu option: 10 MB, loaded on demand only
  cp -r "$tmp"/jupyter-widgets-html-manager-*/package/dist/. "$out/widgets/"
  rm -f "$out"/widgets/*.map
  cp "$tmp"/requirejs-*/package/require.js "$out/widgets/require.js"
  echo "$want" > "$stamp"
  echo "fetch_vendor: MathJax, the widget manager and RequireJS are in $out (pages work offline)"
else
  echo "fetch_vendor: npm not found: pages will load MathJax and widgets from a CDN (install Node.js for offline pages)" >&2
  cdn_loader() { printf 'document.write(%s);\n' "'<script src=\"$1\"><\\/script>'"; }
  cdn_loader "https://cdn.jsdelivr.net/npm/${MATHJAX}/es5/tex-mml-chtml.js" > "$out/mathjax/tex-mml-chtml.js"
  cdn_loader "https://cdn.jsdelivr.net/npm/${REQUIREJS}/require.js" > "$out/widgets/require.js"
  cdn_loader "https://cdn.jsdelivr.net/npm/${WIDGETS}/dist/embed-amd.js" > "$out/widgets/embed-amd.js"
fi
