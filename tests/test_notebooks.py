"""Every notebook in notebooks/ is stored without outputs and runs without an error.

Each notebook runs in a fresh Jupyter kernel (nbclient), from the notebooks folder, with
the suite's environment: ``MUJOCO_GL=egl`` for headless drawing and JAX's persistent
compilation cache in the same folder as the suite's, so compiles the suite already
made are not repeated.
"""

from pathlib import Path

import jax
import nbformat
import pytest
from nbclient import NotebookClient

FOLDER = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))
CELL_TIMEOUT_S = 600


def test_the_numbered_notebooks_are_there():
    names = {p.stem for p in NOTEBOOKS}
    for stem in (
        "01_quickstart",
        "02_world_axis_and_resets",
        "03_domain_randomization",
        "05_throughput",
    ):
        assert stem in names
    assert all(p.stem[:2].isdigit() and p.stem[2] == "_" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "a notebook without code"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend draws
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", jax.config.jax_compilation_cache_dir)
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(FOLDER)}},
    )
    client.execute()  # raises CellExecutionError on the first cell that fails
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # every notebook shows at least one figure
    assert any("image/png" in o.get("data", {}) for o in outputs)
