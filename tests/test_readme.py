"""The README's code runs as written, in order."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run():
    # ```python blocks run here in order; ```py blocks show multi-host code that needs
    # several processes and is exercised by test_sharding.py instead.
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["runner"].num_envs == 64


def test_readme_shows_the_ci_command_first():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci
    assert text.index("make demo") < text.index("make test") < text.index("```python")
