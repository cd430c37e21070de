"""Sphinx configuration. Build from the repository root with:

python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version

# Document the source tree this file is in, even when another copy is installed.
sys.path.insert(0, os.path.abspath(".."))

project = "requests-retryafter"
author = "requests-retryafter contributors"
copyright = "requests-retryafter contributors"
try:
    release = version("requests-retryafter")
except PackageNotFoundError:  # pragma: no cover - docs built from a bare source tree
    release = "0.0.0"
version = ".".join(release.split(".")[:2])

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
autodoc_default_options = {"members": True, "show-inheritance": True}

# napoleon: Google-style docstrings; attributes as fields, so a dataclass field is not
# described twice.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
napoleon_use_rtype = False

# No intersphinx: the docs build offline. References to requests/urllib3 stay plain text.
nitpicky = False

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
