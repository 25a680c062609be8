"""The engine: many worlds of one MuJoCo model as one pytree, and pure functions over it.

Owns the world-axis rule (:mod:`.worlds`), the batched state (:mod:`.state`), the
backends and their capacities (:mod:`.backend`; what each impl's physics does
differently behind one interface: :mod:`.backends`), the physics step and masked resets
(:mod:`.core` for one device's worlds, :mod:`.batch` for an :class:`Engine` over its
mesh), MuJoCo's state vectors (:mod:`.statevec`), guards and health, per-world
parameters and randomization (:mod:`.params`), action latency and pushes
(:mod:`.events`), sharding, the model registry (:mod:`.models`), heterogeneous-world
bookkeeping (:mod:`.groups`), input checks (:mod:`.checks`), old names kept with a
warning (:mod:`.deprecated`), every option in one
dataclass (:mod:`.options`), the checkpoint file format (:mod:`.archive`, the
engine's fields :mod:`.codec`) and the CPU patches (:mod:`.cpu_linalg`,
:mod:`.cpu_fusion`, :mod:`.cpu_pool`).

May import: JAX, MuJoCo, MJX, NumPy, and modules of this subpackage only.

The functions of :mod:`.batch` and :mod:`.statevec` (``configure``, ``build``,
``step``, ``reset``, ``rollout``, ``get_state``, ...) and :class:`.options.Options`
are re-exported here, so ``mjxrunner.engine.step(eng)`` reads as it always did.
"""

from mjxrunner.engine import cpu_fusion, cpu_linalg, cpu_pool

# Before anything compiles: jaxlib 0.10's batched LAPACK calls can deadlock XLA's
# CPU thread pool inside an MJX step (see cpu_linalg), XLA:CPU's fusion emitters
# make deep kinematic trees cost exponentially (see cpu_fusion), and on 2 CPUs a
# second XLA thread only adds hand-offs between threads (see cpu_pool).
cpu_linalg.install()
cpu_fusion.install()
cpu_pool.install()

from mjxrunner.engine import batch as _batch  # noqa: E402
from mjxrunner.engine import deprecated as _deprecated  # noqa: E402
from mjxrunner.engine.batch import *  # noqa: E402, F403 - the engine's functions
from mjxrunner.engine.batch import __all__ as _batch_all  # noqa: E402
from mjxrunner.engine.options import Options  # noqa: E402
from mjxrunner.engine.statevec import *  # noqa: E402, F403 - the state vectors' functions
from mjxrunner.engine.statevec import __all__ as _statevec_all  # noqa: E402

__all__ = ["Options", "cpu_fusion", "cpu_linalg", "cpu_pool", *_batch_all, *_statevec_all]


# the verbs' older forms, deprecated
__getattr__ = _deprecated.module_getattr(__name__, _batch._DEPRECATED)
