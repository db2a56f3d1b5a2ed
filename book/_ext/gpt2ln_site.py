"""Small fixes so every page of the built book loads without a console error.

Loaded by ``_config.yml`` (``sphinx: local_extensions``); the browser tests in
``tests/browser`` check the result.

- Sphinx 7 renders an inline script that an extension adds after the builder
  started twice (once as registered, once as re-read from the registry), so every
  page declared sphinx-thebe's ``const THEBE_JS_URL`` twice: a SyntaxError. Drop
  exact duplicates.
- On pages with widgets (those that load the ipywidgets HTML manager):
  - the manager loads its icon fonts from a path derived from its AMD module name,
    ``<page dir>/@jupyter-widgets/html-manager/dist/``, which does not exist: map
    that module path to the vendored copy in ``_static/widgets/`` (RequireJS reads
    a global ``require`` object defined before it loads as its configuration);
  - the manager typesets widget labels with MathJax 2's ``MathJax.Hub.Queue``, but
    the book serves MathJax 3: forward those calls to ``MathJax.typesetPromise``.
- Accessibility (axe-core, WCAG 2 A/AA; tests/browser): docutils writes the bibliography as
  ``<div role="list">`` holding ``<div role="doc-biblioentry">`` entries, a role that
  DPUB-ARIA 1.1 deprecates and that a list may not hold (``aria-required-children``, serious):
  the entries become ``role="listitem"``.
"""

from __future__ import annotations

import os

WIDGET_PAGE_JS = """\
(function () {
  var root = new URL(document.documentElement.dataset.content_root || "./", window.location.href);
  if (typeof window.require === "undefined") {
    window.require = {paths: {"@jupyter-widgets/html-manager/dist": new URL("_static/widgets", root).href}};
  }
  window.addEventListener("DOMContentLoaded", function () {
    var mj = window.MathJax;
    if (!mj || mj.Hub) return;
    mj.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (cmd) {
          if (!Array.isArray(cmd) || cmd[0] !== "Typeset" || !cmd[2]) return;
          var ready = mj.startup && mj.startup.promise ? mj.startup.promise : Promise.resolve();
          ready.then(function () { return mj.typesetPromise ? mj.typesetPromise([cmd[2]]) : null; })
               .catch(function (err) { console.warn("gpt2ln: MathJax could not typeset a label", err); });
        });
      },
    };
  });
})();
"""


def _filename(script) -> str:
    return os.fspath(getattr(script, "filename", script) or "")


def _fix_page_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, unique = set(), []
    for script in scripts:
        key = (_filename(script), tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the builder's per-page list, restored after the page
    if any(_filename(s).endswith("embed-amd.js") for s in scripts):
        # priority 499: before the widget scripts (500), so before require.js loads
        app.add_js_file(None, body=WIDGET_PAGE_JS, priority=499)


def _fix_citation_roles(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if isinstance(body, str) and 'role="doc-biblioentry"' in body:
        context["body"] = body.replace('role="doc-biblioentry"', 'role="listitem"')


def setup(app):
    # priority 900: after myst-nb has added a page's widget scripts
    app.connect("html-page-context", _fix_page_scripts, priority=900)
    app.connect("html-page-context", _fix_citation_roles)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
