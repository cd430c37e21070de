"""Sphinx configuration. Build from the repository root with:

python -m sphinx -W -n --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version
from typing import Any, Dict, List

# Document the source tree this file is in, even when another copy is installed. Found from
# this file, not the working directory: Sphinx runs it from docs/, but the README's test
# command imports it from the repository's root (its snippets are collected from docs/), and
# ".." then put the directory above the clone first on the path, where any stray module
# (an ``attr.py``, a ``requests`` checkout) hid the real one.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

project = "requests-retryafter"
author = "requests-retryafter contributors"
copyright = "requests-retryafter contributors"
try:
    release = _installed_version("requests-retryafter")
except PackageNotFoundError:  # pragma: no cover - docs built from a bare source tree
    release = "0.0.0"
version = ".".join(release.split(".")[:2])

OWN_PACKAGE = "requests_retryafter"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# MyST: ```{directive} fences, $ ... $ is not math, headings get anchors for links.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autodoc: members in source order, type hints in the description (the signatures stay short).
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
# Types in the description only where the docstring documents the parameter: a dataclass
# such as Policy documents its fields once, as attributes, not again as bare parameters.
autodoc_typehints_description_target = "documented_params"
autodoc_default_options = {"members": True, "show-inheritance": True}

# napoleon: Google-style docstrings; attributes as fields, so a dataclass field is not
# described twice.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
napoleon_use_rtype = False

# Every reference must resolve (``-n`` on the command line does the same).
nitpicky = True

# No intersphinx: the docs build offline, and no inventory of these libraries is available
# without a download. References into them stay plain text; only those are ignored here.
# References to this package's own names must resolve (see _resolve_own_names below).
nitpick_ignore_regex = [
    # the standard library
    (r"py:.*", r"(os|time|dbm|shelve|warnings|threading|logging|email|enum)(\..*)?"),
    # requests, urllib3, redis (imported as redis_lib) and CacheControl, whose names its
    # signatures show bare
    (r"py:.*", r"(requests|urllib3|redis|redis_lib|cachecontrol)(\..*)?"),
    (r"py:class", r"BaseCache|BaseHeuristic|Serializer|CacheController"),
    # this package's private names (a base class such as testing._Window): undocumented by
    # design, so never a link
    (r"py:.*", r"requests_retryafter(\.\w+)*\._\w+"),
]

html_theme = "alabaster"
html_title = f"requests-retryafter {release}"
html_static_path: list[str] = []
html_theme_options = {
    "description": "Retry-After, honoured only as far as each host has earned it",
    "fixed_sidebar": True,
}

# Docstring examples run with the public names in scope:
#   python -m sphinx -W --keep-going -b doctest docs docs/_build/doctest
doctest_global_setup = "from requests_retryafter import *  # noqa: F403"


def _resolve_own_names(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve a bare name in one of this package's docstrings (``:data:`MAX_SECONDS``` in
    ``policy.py``) to the one object of this package documented under that name.

    A docstring names things as its own module sees them, but autodoc documents the object
    where users import it (``requests_retryafter.Policy``), so Sphinx looks the bare name up
    in the wrong module. Only a single match inside this package counts: an ambiguous name,
    a dotted one or one from elsewhere stays unresolved, and ``-n`` reports it. A dotted
    name of this package that is documented as another kind (the class role naming the
    type alias ``adapter.DecisionHook``) links to it.
    """
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target:
        return None
    domain = env.get_domain("py")
    from sphinx.util.nodes import make_refnode

    if target.startswith(OWN_PACKAGE + ".") and target in domain.objects:
        # documented, but as another kind (a type alias named by the class role)
        entry = domain.objects[target]
        return make_refnode(
            app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, target
        )
    if "." in target:
        return None
    matches = [
        (name, entry)
        for name, entry in domain.objects.items()
        if name.startswith(OWN_PACKAGE + ".") and name.endswith("." + target) and not entry.aliased
    ]
    if len(matches) != 1:
        return None
    name, entry = matches[0]
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, name)


def _sentence_first(napoleon: Any) -> Any:
    """Wrap napoleon so that it never reads an attribute's first sentence as its type.

    napoleon takes ``X: Y`` on the first line of an attribute's docstring as the type ``X``
    of text ``Y`` (Google style), so ``#: The host is held: calls raise HostHeld`` became a
    type "The host is held", rendered as a broken link. A type has no space in it; a
    sentence does. Such a docstring of this package is left as it is written.
    """

    def process(app: Any, what: str, name: str, obj: Any, options: Any, lines: List[str]) -> None:
        if what in ("attribute", "data", "property") and name.startswith(OWN_PACKAGE) and lines:
            before, colon, _ = lines[0].partition(":")
            if colon and " " in before.strip():
                return
        napoleon(app, what, name, obj, options, lines)

    return process


def setup(app: Any) -> Dict[str, Any]:
    """Register the resolver of this package's bare names; wrap napoleon (see above)."""
    from sphinx.ext.napoleon import _process_docstring

    app.connect("missing-reference", _resolve_own_names)
    for listener in list(app.events.listeners["autodoc-process-docstring"]):
        if listener.handler is _process_docstring:
            app.disconnect(listener.id)
            app.connect(
                "autodoc-process-docstring",
                _sentence_first(_process_docstring),
                priority=listener.priority,
            )
    return {"parallel_read_safe": True}
