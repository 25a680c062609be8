"""Every notebook in notebooks/ is stored without outputs and runs without an error.

Each notebook runs in a fresh Jupyter kernel (nbclient), from the notebooks folder, with
the suite's environment: ``MUJOCO_GL=egl`` for headless drawing and JAX's persistent
compilation cache in the same folder as the suite's, so compiles the suite already
made are not repeated. The runs are background jobs (conftest): this file run as a
script executes one notebook and writes it, with its outputs, to the job's folder.
"""

import sys
from pathlib import Path

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


def execute(path: Path, out: Path) -> None:
    """Runs the notebook at ``path``; writes it with its outputs to ``out``, also when
    a cell fails (then raises CellExecutionError)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(FOLDER)}},
    )
    try:
        client.execute()
    finally:
        nbformat.write(nb, out / path.name)


# Notebooks whose compiled programs run long keep XLA's own optimization level: at the
# suite's level 0 (conftest) programs compile faster but run slower, ~5x for MJX's
# rollouts. Measured alone on 2 cores: the throughput notebook's benchmark 36 s at
# level 0 against 31 s, the training notebook 31 s against 24 s; the other notebooks
# took longer at XLA's level (the own-robot one 38 s against 42 s). The throughput
# notebook's figures are a user's then, too.
FULL_SPEED = {"04_training", "05_throughput"}


def register(path: Path) -> None:
    import conftest

    @conftest.background(f"notebook {path.stem}", needed_by=f"test_notebook_runs[{path.stem}]")
    def launch(out):
        env = conftest.subprocess_env(MUJOCO_GL="egl")
        env.pop("MPLBACKEND", None)  # the kernel's inline backend draws
        if path.stem in FULL_SPEED:
            env["XLA_FLAGS"] = env["XLA_FLAGS"].replace(conftest.FAST_COMPILE, "")
        return [conftest.start("test_notebooks.py", str(path), str(out), out=out, env=env)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path):
    import conftest

    [(returncode, log)], out = conftest.finished(f"notebook {path.stem}")
    assert returncode == 0, log[-4000:]
    nb = nbformat.read(out / path.name, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code")
    assert not [o for o in outputs if o.output_type == "error"]
    # every notebook shows at least one figure
    assert any("image/png" in o.get("data", {}) for o in outputs)


if __name__ == "__main__":
    execute(Path(sys.argv[1]), Path(sys.argv[2]))
else:
    for _path in NOTEBOOKS:
        register(_path)
