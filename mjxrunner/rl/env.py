"""The functional RL env: ``reset(key) -> state``, ``step(state, action) -> state``.

An :class:`Env` binds a :class:`~mjxrunner.tasks.Task` to a device model and a
number of worlds. Its functions are pure and jit-able, so a whole training loop can
be one ``jit`` of ``lax.scan`` loops; the task's single-world functions are mapped
over the world axis by ``vmap``, and stepping, world selection and restoring reuse
:func:`mjxrunner.engine.core.step`, :func:`mjxrunner.engine.core.reset` and
:func:`mjxrunner.engine.worlds.select_worlds`.

Autoreset modes, with Gymnasium's meaning:

* ``"next_step"``: a world whose step ended an episode (``terminated`` or
  ``truncated``) is restarted by the NEXT call to :func:`step`, which ignores its
  action and returns the reset observation, reward 0 and both flags False.
* ``"same_step"``: the world is restarted inside the step that ended the episode.
  ``obs`` is then the reset observation; the terminal observation is in
  ``final_obs`` and ``final_mask`` says which worlds restarted. The flags report
  the episode that just ended.
* ``"disabled"``: no restart; call :func:`reset_worlds` yourself. Stepping an ended
  world continues its physics, its flags stay those of its episode's end until it
  is restarted, and its episode is counted only once.

Fresh starts: each restart draws a new start for the world from the world's own PRNG
stream (``RunnerState.rng``): world ``i``'s stream begins at
``jax.random.split(key, num_envs)[i]`` for the ``key`` given to :func:`reset`, and
every restart splits it into ``(next key, draw key)`` and calls
``task.initial_state(model, start, draw_key)``, followed by ``mjx.forward`` unless
the task sets ``forward_on_reset=False``. Only restarted worlds advance their
stream, so a world's sequence of starts does not depend on the other worlds. The
restart touches only the worlds that restart, and a step where none ends does no
restart work. Its cost follows the number of worlds that end: they restart in
passes of ``restart_slots`` worlds (default ``ceil(num_envs / 8)``), each gathering
the next ended worlds from every per-world leaf (keys, parameters, runner and
observation state), drawing their starts with ``initial_state`` (and forward),
observing them, and scattering them back; a step observes the whole batch once,
and a step with more ended worlds than slots makes more passes, so no world ever
waits for its restart. A
world's start depends only on its key and its parameters, so the number of
slots changes the cost, not which worlds restart, their keys or the state the
task draws. One caveat: XLA vectorizes a forward pass over ``k`` worlds
differently than over ``num_envs``, so quantities the forward derives
(accelerations, constraint forces), and a first observation that reads them, may
differ in the last bits between slot
counts (hopper: 2.4e-7 in ``qacc``; cartpole: bit-identical). ``reset`` draws
all worlds in one pass. A cached pool
(:meth:`Env.with_reset_pool`) replaces that by a gather of precomputed starts:
cheaper per step when the start needs a forward pass, but episodes then begin from
only ``pool_size`` distinct states, drawn once, with the model the pool was made
with.

Per-world state across episodes (a task's curriculum, ``EnvState.curriculum``):
:func:`reset` draws it; a restart first moves it for the restarted worlds by the
state their episodes ended in, then draws their starts with it (see
:mod:`mjxrunner.rl.curriculum`). Such a task takes no reset pool.

Everything the runner can do, the env can do, with the same arguments: impl
"warp" with its capacities, ``devices=`` (every function runs under ``shard_map``
over the ``"worlds"`` axis, restarts included), per-world parameters
(:meth:`Env.with_param`) and randomization redrawn on every restart
(:meth:`Env.with_randomization`), guards (:mod:`mjxrunner.engine.guards`) and checkpoints
(:func:`save`, :func:`load`). The engine (:mod:`mjxrunner.engine`) does the work.

Pixels: for a task with ``Task.pixels`` (a :class:`~mjxrunner.kit.pixels.PixelSpec`,
impl "warp" only) the env owns a render context for its worlds (one per device when
sharded; several CPU devices are refused, as they share one Warp device) and renders
inside the compiled step, after the physics: bodies, cameras and lights are posed
for the new ``qpos`` (:meth:`PixelRenderer.pose`), the render token is carried in
the runner's data, and the frames join the observation as terms (``"pixels"``,
``"depth"``, ``"segmentation"``) before noise and history, so frame stacking is the
history of ``"pixels"``. ``PixelSpec.every = k`` renders every k-th step and shows
the last frames in between (``EnvState.last_frames``). MJX renders all worlds of a
context at once, so restarted worlds are rendered in a second context of
``restart_slots`` worlds, gathered a pass of slots at a time: a restart changes
only the restarted worlds' frames and costs about ``slots / num_envs`` of a full
render per pass; a step without restarts renders once (``lax.cond``).

Guards: a world that trips a guard with policy ``"truncate"`` (by default the
instability guard, the Warp overflow guard and the non-finite-action guard) is
``truncated`` in that step, so autoreset restarts it; ``nonfinite`` shows the
instability guard's flags. Policies ``"warn"`` and ``"raise"`` are applied by the
stateful front doors (:class:`~mjxrunner.gym.MjxVectorEnv`); inside your own
``jit`` they only flag and count (``state.runner.tripped``, ``state.runner.health``).
"""

from mjxrunner.rl.env_io import load, save
from mjxrunner.rl.episode import (
    AUTORESET_MODES,
    DISABLED,
    NEXT_STEP,
    SAME_STEP,
    AnyState,
    EnvState,
    EpisodeStats,
    LastFrames,
    episode_statistics,
    health_report,
    reseed,
    with_episode_length,
    with_streams,
)
from mjxrunner.rl.functional import (
    AnyEnv,
    Env,
    check_action,
    check_guards,
    flat_step,
    guard_error,
    jit_reset,
    jit_reset_worlds,
    jit_step,
    make,
    reset,
    reset_from_keys,
    reset_worlds,
    step,
    world_scene,
)

__all__ = [
    "AUTORESET_MODES",
    "DISABLED",
    "NEXT_STEP",
    "SAME_STEP",
    "AnyEnv",
    "AnyState",
    "Env",
    "EnvState",
    "EpisodeStats",
    "LastFrames",
    "check_action",
    "check_guards",
    "episode_statistics",
    "flat_step",
    "guard_error",
    "health_report",
    "jit_reset",
    "jit_reset_worlds",
    "jit_step",
    "load",
    "make",
    "reset",
    "reset_from_keys",
    "reset_worlds",
    "reseed",
    "save",
    "step",
    "with_episode_length",
    "with_streams",
    "world_scene",
]
