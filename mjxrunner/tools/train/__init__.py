"""Training as part of the package: train, play, export and the deploy check.

- :mod:`.ppo`: the project's PPO, purejaxrl-style, on the functional env;
- :mod:`.trainer`: ``mjxrunner train``: chunks of updates, logs, checkpoints, resume;
- :mod:`.rsl_rl_trainer` and :mod:`.brax_trainer`: ``train --trainer rsl_rl`` and
  ``--trainer brax``, those trainers' own PPO on their doors, into run folders that
  ``play``, ``export`` and ``sim2sim`` read as they read the project's;
- :mod:`.run_dir`: a run's folder (record and checkpoint);
- :mod:`.play`: the trained policy for whole episodes, returns and videos;
- :mod:`.onnx_graph` and :mod:`.export`: the policy and the task's observation as ONNX;
- :mod:`.deploy`: the loop that runs an export on plain MuJoCo (no JAX);
- :mod:`.sim2sim`: that loop, scored like ``play``, compared with it;
- :mod:`.commands`: the four commands of the command line.

Nothing here is imported by ``import mjxrunner``; these modules need the ``train``
extra (optax, tensorboardX, onnx, onnxruntime).
"""

TRAINERS = ("ppo", "rsl_rl", "brax")
"""Trainers ``mjxrunner train`` runs: the project's PPO, and rsl_rl's and Brax's
through their doors (``mjxrunner.rsl_rl``, ``mjxrunner.brax``); the module of
trainer ``x`` other than ``ppo`` is ``x_trainer``."""
