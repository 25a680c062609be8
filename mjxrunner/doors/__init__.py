"""Front doors: the stateful and framework-facing shells over the engine and the env.

Owns :class:`~mjxrunner.MultiEnvRunner` (:mod:`.runner`) and its groups
(:mod:`.group_runner`), display layouts (:mod:`.layout`), the packed step every
trainer door shares (:mod:`.door`), and the Gymnasium (:mod:`.gym`), PyTorch
(:mod:`.torch`), rsl_rl (:mod:`.rsl_rl`), Stable-Baselines3 (:mod:`.sb3`) and Brax
(:mod:`.brax`) adapters with the Gymnasium registrations (:mod:`.registration`). The
torch, rsl_rl, SB3 and Brax modules import their optional trainers; nothing else here
does.

May import: :mod:`mjxrunner.engine`, :mod:`mjxrunner.kit`, :mod:`mjxrunner.tasks`,
:mod:`mjxrunner.rl` and modules of this subpackage.
"""

from mjxrunner.doors import group_runner, runner  # noqa: F401 - groups register here
