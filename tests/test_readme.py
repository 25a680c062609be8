"""The README's code runs as written, in order: a background job (conftest) runs this
file as a script, which executes the blocks in one namespace."""

import re
import sys
from pathlib import Path

import conftest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    # ```python blocks run in order; ```py blocks show multi-host code that needs
    # several processes and is exercised by test_sharding.py instead.
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def run_blocks() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["runner"].num_envs == 64
    print(f"readme: {len(blocks)} blocks ran")


@conftest.background("test_readme")
def launch(out):
    return [conftest.start("test_readme.py", "run", out=out)]


def test_readme_python_blocks_run():
    [(returncode, log)], _ = conftest.finished("test_readme")
    assert returncode == 0, log[-4000:]
    assert f"readme: {len(python_blocks())} blocks ran" in log


def test_readme_shows_the_ci_command_first():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci
    assert text.index("make demo") < text.index("make test") < text.index("```python")


if __name__ == "__main__" and sys.argv[1:] == ["run"]:
    run_blocks()
