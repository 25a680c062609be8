"""The code of the README and of the documentation's pages runs as written, in order:
a background job (conftest) runs this file as a script, which executes every
```python block of README.md, then of docs/index.md and of each page its contents
list, in that order, in one namespace (a page's examples go on from what the README
and the pages before it defined)."""

import re
import sys
from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"


def python_blocks(path: Path) -> list[str]:
    # ```python blocks run in order; ```py blocks show multi-host code that needs
    # several processes and is exercised by test_sharding.py instead.
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def pages() -> list[Path]:
    """The pages docs/index.md's toctrees list, in their order."""
    names = []
    for tree in re.findall(r"```\{toctree\}\n(.*?)```", INDEX.read_text(), flags=re.S):
        names += [n for n in map(str.strip, tree.splitlines()) if n and not n.startswith(":")]
    return [DOCS / f"{name}.md" for name in names]


def sources() -> list[Path]:
    return [README, INDEX, *pages()]


def label(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def run_blocks() -> None:
    namespace: dict = {}
    total = 0
    for path in sources():
        blocks = python_blocks(path)
        for block in blocks:
            exec(compile(block, str(path), "exec"), namespace)
        print(f"{label(path)}: {len(blocks)} blocks ran", flush=True)
        total += len(blocks)
    assert namespace["runner"].num_envs == 64
    print(f"all: {total} blocks ran")


@conftest.background("test_readme")
def launch(out):
    return [conftest.start("test_readme.py", "run", out=out)]


def test_readme_python_blocks_run():
    [(returncode, log)], _ = conftest.finished("test_readme")
    assert returncode == 0, log[-4000:]
    for path in sources():
        assert f"{label(path)}: {len(python_blocks(path))} blocks ran" in log
    assert f"all: {sum(len(python_blocks(p)) for p in sources())} blocks ran" in log


def test_readme_shows_the_ci_command_first():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci
    assert text.index("make demo") < text.index("make test") < text.index("```python")


def test_every_page_is_listed_and_has_its_code_run():
    listed = pages()
    assert len(listed) == len(set(listed))
    assert all(page.exists() for page in listed), [p for p in listed if not p.exists()]
    on_disk = {p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts}
    assert on_disk == {INDEX, *listed}
    assert len(python_blocks(README)) >= 1
    assert sum(len(python_blocks(p)) for p in listed) >= 20


def test_readme_links_resolve():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to the documentation's pages"
    assert [t for t in local if not (ROOT / t).exists()] == []


if __name__ == "__main__" and sys.argv[1:] == ["run"]:
    run_blocks()
