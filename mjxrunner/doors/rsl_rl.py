"""rsl_rl's ``VecEnv`` over the torch front door, so ``OnPolicyRunner`` trains on it.

rsl-rl-lib 5.x expects what Isaac Lab gives it: observations as a ``TensorDict`` of
groups (here ``"policy"``, which rsl_rl's default ``obs_groups`` resolution uses
for both actor and critic; for a task with observation terms, one group per term,
which the runner's ``obs_groups`` config assigns to actor and critic), autoreset
in the same step, ``dones`` = ``terminated | truncated`` and
``extras["time_outs"]`` = ``truncated``. With ``time_outs`` rsl_rl's PPO
bootstraps a truncated step's reward with the value of the observation it acted
on (the terminal observation of the episode is not used; ``extras["final_obs"]``
has it for trainers that want it).
``OnPolicyRunner.learn(..., init_at_random_ep_len=True)`` writes random step counts
into :attr:`RslRlVecEnv.episode_length_buf`; they reach the env's own counters, so
time limits fall on different steps in different worlds.

Imports torch, tensordict and rsl_rl (the extra ``mjxrunner[rsl_rl]``).
"""

from __future__ import annotations

from typing import Any

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from mjxrunner.doors.torch import TorchVecEnv


class RslRlVecEnv(VecEnv):
    """A :class:`~mjxrunner.torch.TorchVecEnv` as an rsl_rl ``VecEnv``.

    Args:
      task: a task (or its name), or a ``TorchVecEnv`` to wrap as it is.
      num_envs: number of worlds (not with a ``TorchVecEnv``).
      **options: options of :class:`~mjxrunner.torch.TorchVecEnv` (seed, impl,
        device, guards, ``normalize_obs``, ...).

    The first :meth:`get_observations` resets the worlds if nothing has yet.
    """

    def __init__(self, task: Any, num_envs: int | None = None, **options: Any):
        if isinstance(task, TorchVecEnv):
            if num_envs is not None or options:
                raise ValueError("pass either a TorchVecEnv or a task with its options")
            self.env = task
        else:
            if num_envs is None:
                raise ValueError("num_envs is required with a task")
            self.env = TorchVecEnv(task, num_envs, **options)
        self.num_envs = self.env.num_envs
        self.num_actions = self.env.num_actions
        self.max_episode_length = self.env.max_episode_length
        self.device = self.env.device
        self.cfg = self.env.cfg
        # The last episode_length_buf handed out and a copy of what it held then.
        self._handed: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """``(num_envs,)`` steps of each world's running episode: a copy of the env's
        counters. Assigning to it (``buf = x``, ``buf += x``) sets them, checked;
        writes into it (``buf[ids] = 0``, Isaac Lab's habit) reach the env, checked
        the same way, before the next step, observation or read of it."""
        self._ensure_reset()
        buf = self.env.episode_length
        self._handed = (buf, buf.clone())
        return buf

    @episode_length_buf.setter
    def episode_length_buf(self, lengths: torch.Tensor) -> None:
        self._handed = None  # an assignment replaces what was written into the copy
        self._ensure_reset()
        self.env.set_episode_length(lengths)

    def _ensure_reset(self) -> None:
        handed, self._handed = self._handed, None
        if handed is not None and not torch.equal(*handed):
            # Written into since it was handed out: through the setter's checks (a
            # refused write raises here and leaves the counters as they were).
            self.env.set_episode_length(handed[0])
        if not self.env.ready:
            self.env.reset()

    @staticmethod
    def _groups(obs: dict[str, torch.Tensor], n: int) -> TensorDict:
        return TensorDict(obs, batch_size=[n])

    def get_observations(self) -> TensorDict:
        """The current observation groups, ``{"policy": (num_envs, obs_dim)}`` (one
        per term for a task with observation terms)."""
        self._ensure_reset()
        return self._groups(self.env.observations(), self.num_envs)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """``(obs, rewards, dones, extras)`` as rsl_rl's ``VecEnv.step`` documents."""
        self._ensure_reset()
        obs, reward, terminated, truncated, extras = self.env.step(actions)
        dones = (terminated | truncated).to(torch.long)
        return self._groups(obs, self.num_envs), reward, dones, extras
