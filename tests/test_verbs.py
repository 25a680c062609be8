"""The engine's verbs: one form each, taking an Engine; the older forms warn."""

import jax.numpy as jnp
import numpy as np
import pytest

import mjxrunner.engine
from mjxrunner import MultiEnvRunner
from mjxrunner import engine as E
from mjxrunner.engine.params import Term

N = 4


@pytest.fixture(scope="module")
def eng():
    r = MultiEnvRunner("cartpole", N, impl="c", num_threads=1, seed=3)
    r.set_randomization([Term("dof_damping", 0.5, 2.0)], every_n_steps=2)
    r.set_actions(np.full((N, 1), 0.3))
    return r.engine


def qpos(tree):
    return np.asarray(tree.data.qpos)


def old(name):
    with pytest.warns(DeprecationWarning, match=f"mjxrunner.engine.{name} is deprecated"):
        return getattr(mjxrunner.engine, name)


def test_a_local_engine_steps_as_the_engine_does(eng):
    whole = E.step(eng)
    mine = E.step(E.local(eng.config, eng.model, eng.state, default_model=eng.default_model))
    assert mine.config.mesh is None and mine.default is None
    np.testing.assert_array_equal(qpos(mine.state), qpos(whole.state))
    # a step that redraws changes the model; the snapshot is kept as it was
    twice = E.step(whole)
    assert not np.array_equal(twice.model.tree.dof_damping, eng.model.tree.dof_damping)
    assert twice.default is eng.default


def test_reset_restores_the_worlds_of_the_mask_it_is_given(eng):
    stepped = E.step(E.step(eng))
    mask = jnp.array([True, False, True, False])
    back = E.reset(stepped, mask)
    np.testing.assert_array_equal(qpos(back.state)[[0, 2]], qpos(eng.default)[[0, 2]])
    np.testing.assert_array_equal(qpos(back.state)[[1, 3]], qpos(stepped.state)[[1, 3]])
    # a source drawn from the restored model, as the env's restarts draw theirs
    seen = []

    def source(model, state):
        seen.append(model)
        return eng.default

    drawn = E.reset(stepped, mask, source)
    assert len(seen) == 1
    np.testing.assert_array_equal(qpos(drawn.state), qpos(back.state))


def test_the_older_forms_warn_and_compute_what_the_verbs_do(eng):
    stepped = E.step(eng)
    model, state = old("advance")(eng.config, eng.model, eng.default_model, eng.ref, eng.state)
    np.testing.assert_array_equal(qpos(state), qpos(stepped.state))
    assert model is not None  # this config redraws in the step
    _, state = old("step_local")(eng.config, eng.model, eng.default_model, eng.ref, eng.state)
    np.testing.assert_array_equal(qpos(state), qpos(stepped.state))

    mask = jnp.array([False, True, False, False])
    want = E.reset(stepped, mask)
    parts = (eng.config, stepped.model, eng.default_model, eng.ref, stepped.state)
    _, state = old("restore")(*parts, eng.default, mask)
    np.testing.assert_array_equal(qpos(state), qpos(want.state))
    _, state = old("reset_local")(*parts, eng.default, mask, jnp.asarray(False), True)
    np.testing.assert_array_equal(qpos(state), qpos(want.state))

    redrawn = E.randomize(eng, mask)
    for name in ("redraw", "randomize_local"):
        model, _ = old(name)(eng.config, eng.model, eng.default_model, eng.ref, eng.state, mask)
        np.testing.assert_array_equal(model.tree.dof_damping, redrawn.model.tree.dof_damping)

    actions = jnp.full((3, N, 1), 0.1)
    final, (want_qpos, _) = E.rollout(eng, actions, 3)
    state, (got_qpos, _) = old("roll")(eng.config, eng.model, eng.state, actions, 3)
    np.testing.assert_array_equal(got_qpos, want_qpos)
    np.testing.assert_array_equal(qpos(state), qpos(final.state))

    # a new episode with update_fk: positions follow the moved qpos in those worlds only
    moved = eng.state.replace(data=eng.state.data.replace(qpos=eng.state.data.qpos + 0.2))
    some = jnp.array([True, True, False, False])
    for name in ("begin", "begin_local"):
        state = old(name)(eng.config, eng.model, moved, some, True)
        xpos, before = np.asarray(state.data.xpos), np.asarray(eng.state.data.xpos)
        assert not np.allclose(xpos[:2], before[:2]) and np.array_equal(xpos[2:], before[2:])


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'advance_all'"):
        mjxrunner.engine.advance_all  # noqa: B018
    assert "advance" not in E.__all__ and "step" in E.__all__ and "local" in E.__all__


def test_mjx_jitted_passes_keep_their_old_path():
    from mjxrunner.engine import backends, core

    for name in ("MJX_STEP", "MJX_FORWARD"):
        with pytest.warns(DeprecationWarning, match=f"core.{name} is deprecated"):
            assert getattr(core, name) is getattr(backends.mjx, name)
