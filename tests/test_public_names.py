"""Public names keep working. ``data/public_names.json`` lists every public name of
every module when the backend redesign began (a module's ``__all__``, else the
functions and classes it defines and its constants; written by
``data/make_public_names.py``): each must still resolve, and
those that moved warn with a ``DeprecationWarning`` naming what replaces them. A
name removed fails here until it has a deprecated alias."""

import importlib
import json
import warnings
from pathlib import Path

import jax
import mujoco
import numpy as np
import pytest

from mjxrunner.doors import runner
from mjxrunner.engine import backend, backends, models, packing
from mjxrunner.engine.options import Options

NAMES = json.loads((Path(__file__).parent / "data" / "public_names.json").read_text())


def test_every_recorded_public_name_still_resolves():
    missing = []
    for module, names in NAMES.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            found = importlib.import_module(module)
            missing += [f"{module}.{name}" for name in names if not hasattr(found, name)]
    assert missing == []
    assert len(NAMES) > 80 and sum(map(len, NAMES.values())) > 900  # the whole package


def deprecated(name):
    return pytest.warns(DeprecationWarning, match=rf"{name}.* is deprecated: ")


def test_backend_make_still_takes_the_choice_as_keywords():
    m = models.load("cartpole")
    with deprecated(r"Backend.make\(m, num_envs, impl=..., ...\)"):
        old = backend.Backend.make(m, 4, impl="warp", naconmax=64)
    assert old == backend.Backend.make(m, 4, Options(impl="warp", naconmax=64))
    with deprecated("Backend.make"):
        assert backend.Backend.make(m, 4, "c", num_threads=1).num_threads == 1
    with deprecated("Backend.make"):
        assert backend.Backend.make(m, 4).impl == "jax"  # the old default
    with deprecated("Backend.options"):
        choice = old.options
    assert choice == {
        "impl": "warp",
        "graph_mode": old.graph_mode,
        "num_threads": None,
        **old.caps.as_dict(),
    }
    with deprecated("Backend.make"):
        assert backend.Backend.make(m, 4, **choice) == old  # they rebuild the choice
    with pytest.raises(TypeError, match=r"unknown keyword\(s\) \['naconmx'\]"):
        backend.Backend.make(m, 4, impl="warp", naconmx=64)
    with pytest.raises(TypeError, match="an Options, or the old keywords, not both"):
        backend.Backend.make(m, 4, Options(), impl="c")


def test_the_moved_put_functions_give_what_the_backend_puts():
    m = models.load("cartpole")
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    with deprecated("mjxrunner.engine.backend.put_model"):
        model = backend.put_model(m, "jax", None)
    with deprecated("mjxrunner.engine.backend.put_data"):
        data = backend.put_data(m, d, "jax", "cpu")
    chosen = backend.Backend.make(m, 1, Options())
    np.testing.assert_array_equal(model.body_mass, chosen.put_model(m).body_mass)
    np.testing.assert_array_equal(data.qpos, chosen.put_data(m, d).qpos)
    with deprecated("put_model"):
        assert backends.of(backend.put_model(m, "c", "cpu")).name == "c"
    caps = backend.Backend.make(m, 1, Options(impl="warp")).caps
    with deprecated("put_data"):  # Warp's capacities, which the other impls ignore
        assert backends.of(backend.put_data(m, d, "c", "cpu", caps)).name == "c"


def test_packing_and_the_runner_keep_their_old_names():
    tree = {"a": jax.numpy.arange(3.0), "b": jax.numpy.ones((2, 2), jax.numpy.int32)}
    layout = packing.Layout.of(tree)
    buffers = packing.packer(layout)(jax.tree.leaves(tree))
    with deprecated("mjxrunner.engine.packing.unpacked"):
        back = packing.unpacked(layout, buffers)
    jax.tree.map(np.testing.assert_array_equal, back, tree)
    with deprecated("mjxrunner.doors.runner.PACK_LIMIT"):
        assert runner.PACK_LIMIT == backends.c.COPIED_PACK_LIMIT == 2 << 20
    with pytest.raises(AttributeError, match="has no attribute 'PACK_LIMITS'"):
        runner.PACK_LIMITS  # noqa: B018
