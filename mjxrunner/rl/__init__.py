"""The RL layer: a task over the engine as a pure, jit-able environment.

Owns the functional env (:mod:`.env`: ``make``, ``reset``, ``step``, autoreset,
restart slots, episode statistics and its checkpoints), heterogeneous groups of
envs behind one world index (:mod:`.group_env`) and per-world curricula
(:mod:`.curriculum`).

May import: :mod:`mjxrunner.engine`, :mod:`mjxrunner.kit`, :mod:`mjxrunner.tasks`
and modules of this subpackage.
"""

from mjxrunner.rl import env, group_env  # noqa: F401 - groups register here
