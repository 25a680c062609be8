"""Sphinx configuration of the documentation site: ``make docs`` builds it into
``docs/_build/html``, with warnings as errors (tests/test_docs.py does the same)."""

import sys
from pathlib import Path

# autodoc imports this tree's package, not whichever mjxrunner is installed.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

project = "mjxrunner"
author = "the mjxrunner authors"
copyright = "the mjxrunner authors"  # noqa: A001 (Sphinx's name for it)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "runs"]

# Headings get anchors, so a page can link to a section of another (page.md#a-heading).
myst_heading_anchors = 3

# The docstrings are Google style (Args:, Returns:, Raises:) with RST roles.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" sections as fields of their class, not as entries of their own that
# would repeat the dataclass fields autodoc already lists.
napoleon_use_ivar = True
# A module's members are what it defines: names it re-exports in __all__ are
# documented where they are defined, once.
autodoc_default_options = {"show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"

html_theme = "alabaster"
html_title = "mjxrunner"
