"""The documentation site builds with every warning an error, as ``make docs`` builds
it. Sphinx runs as a background job (conftest) in a process of its own: autodoc
imports every module of the package, the trainers' front doors included."""

import re
import subprocess
import sys
from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def public_modules() -> set[str]:
    """Every module of the package whose name has no leading underscore."""
    names = set()
    for path in (ROOT / "mjxrunner").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts):
            names.add(".".join(parts))
    return names


@conftest.background("test_docs")
def launch(out):
    log = open(out / "sphinx.log", "w")
    html = out / "html"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", str(DOCS), str(html)],
        cwd=ROOT,
        env=conftest.subprocess_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    proc.log_path = Path(log.name)
    return [proc]


def test_docs_build_with_warnings_as_errors():
    [(returncode, log)], out = conftest.finished("test_docs")
    assert returncode == 0, log[-4000:]
    assert "build succeeded" in log
    html = out / "html"
    for page in DOCS.rglob("*.md"):
        if "_build" not in page.relative_to(DOCS).parts:
            built = html / page.relative_to(DOCS).with_suffix(".html")
            assert built.exists(), built
    # The API reference is drawn from the docstrings, not left empty.
    engine = (html / "reference" / "engine.html").read_text()
    assert 'id="mjxrunner.engine.worlds.world_mask"' in engine


def test_the_reference_documents_every_public_module_once():
    text = "".join(p.read_text() for p in sorted((DOCS / "reference").glob("*.md")))
    documented = re.findall(r"^\.\. automodule:: (\S+)$", text, flags=re.M)
    assert len(documented) == len(set(documented))
    assert set(documented) == public_modules()
