"""Training as part of the package: train, play, export and the deploy check.

- :mod:`.ppo`: the project's PPO, purejaxrl-style, on the functional env;
- :mod:`.trainer`: ``mjxrunner train``: chunks of updates, logs, checkpoints, resume;
- :mod:`.run_dir`: a run's folder (record and checkpoint);
- :mod:`.play`: the trained policy for whole episodes, returns and videos;
- :mod:`.onnx_graph` and :mod:`.export`: the policy and the task's observation as ONNX;
- :mod:`.deploy`: the loop that runs an export on plain MuJoCo (no JAX);
- :mod:`.sim2sim`: that loop, scored like ``play``, compared with it;
- :mod:`.commands`: the four commands of the command line.

Nothing here is imported by ``import mjxrunner``; these modules need the ``train``
extra (optax, tensorboardX, onnx, onnxruntime).
"""

TRAINERS = ("ppo",)
"""Trainers ``mjxrunner train`` runs. rsl_rl and Brax train through their doors
(``mjxrunner.rsl_rl``, ``mjxrunner.brax``) with their own scripts."""
