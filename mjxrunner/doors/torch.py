"""The env as PyTorch tensors, shared with JAX through DLPack: the torch front door.

:class:`TorchVecEnv` has the interface of an Isaac Lab ``DirectRLEnv`` (observation
groups as a dict of tensors, ``step`` returning ``(obs, reward, terminated,
truncated, extras)``, same-step autoreset, ``extras["time_outs"]``), which is what
torch trainers expect; :mod:`mjxrunner.rsl_rl` adapts it to rsl_rl's ``VecEnv`` and
skrl wraps it as it is (``skrl.envs.wrappers.torch.wrap_env(env,
wrapper="isaaclab")``).

Tensors cross without copies where DLPack allows it: the compiled step gathers what
it hands out into two flat JAX buffers (floats: observations, final observations,
rewards; bools: the flags), each exported once (``torch.from_dlpack``), and the
tensors are views into them. Those buffers are the step's outputs, not its state:
what the door hands out never shares memory with the state (after a reset, the
observation and :attr:`TorchVecEnv.episode_length` are copies), so writing into
a tensor changes that tensor only; the state changes through the door's methods,
which check their input. The outputs stay valid after later steps (each step hands
out new arrays; only the door's own packed state is updated in place). An action
tensor on the env's device becomes a JAX array over the same memory on CUDA; on a
CPU it is copied (a few bytes per world), since handing XLA a foreign buffer cost
more host time per step there than the copy. Where sharing is impossible the data
is copied: an action of another dtype is converted to the env's float type first,
and JAX copies an imported CPU buffer that is not aligned as XLA needs. One env
lives on one device: torch trainers run one process per GPU (a sharded env is
refused).

This module imports torch; ``import mjxrunner`` does not (install the extra
``mjxrunner[torch]``).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import torch
from gymnasium.vector.utils import batch_space

from mjxrunner.doors import door
from mjxrunner.doors import gym as gym_
from mjxrunner.engine import checks
from mjxrunner.rl import env as env_
from mjxrunner.tasks.base import Task


def to_torch(x: jax.Array) -> torch.Tensor:
    """A JAX array as a tensor over the same memory."""
    return torch.from_dlpack(x)


def _own(x: jax.Array) -> torch.Tensor:
    """A tensor of its own with ``x``'s values: for arrays of the door's state, which a
    tensor over the same memory would let a caller write without any check."""
    return to_torch(x).clone()


def to_jax(t: torch.Tensor) -> jax.Array:
    """A tensor as a JAX array over the same memory where XLA accepts the buffer."""
    return jax.dlpack.from_dlpack(t.detach().contiguous())


groups_of = door.groups_of
_pack = door.outputs  # what a step hands out, in few buffers (one DLPack export each)


def torch_device(device: jax.Device) -> torch.device:
    """The torch device of a JAX device."""
    if device.platform == "cpu":
        return torch.device("cpu")
    if device.platform in ("gpu", "cuda"):
        return torch.device("cuda", device.local_hardware_id)
    raise ValueError(f"no torch device for JAX platform {device.platform!r}")


class TorchVecEnv:
    """``num_envs`` worlds of a task with PyTorch tensors in and out.

    Args:
      task: a :class:`~mjxrunner.tasks.Task` or a registered task name.
      num_envs: number of worlds.
      seed: seed of the first :meth:`reset` when it is given none.
      model: a scene to use instead of the task's.
      **options: every other option of :func:`mjxrunner.env.make` (the engine's:
        ``impl``, ``device``, whose torch device the tensors live on, Warp capacities,
        guards and policies, ``restart_slots``, ``normalize_obs``, ``obs_clip``,
        ``reset_pool``), except ``autoreset`` (always ``"same_step"``) and
        ``devices``.

    Attributes:
      num_envs, num_actions, max_episode_length: sizes, as torch trainers name them.
      device: the ``torch.device`` of every tensor.
      single_observation_space: ``Dict({"policy": Box(obs_dim)})``, or for a task
        with observation terms a ``Dict`` with one entry per term (each term is an
        observation group).
      single_action_space: ``Box`` of the actuators' ``ctrlrange``.
      observation_space, action_space: the same with a leading ``num_envs`` axis.

    Steps autoreset in the same step (Isaac Lab's convention): a world whose
    episode ended returns its new episode's first observation, and
    ``extras["final_obs"]`` (with ``extras["final_mask"]``) holds the terminal
    observations. ``terminated`` and ``truncated`` stay apart;
    ``extras["time_outs"]`` is ``truncated``, for trainers that bootstrap at time
    limits.
    """

    def __init__(
        self,
        task: Task | str,
        num_envs: int,
        *,
        seed: int = 0,
        model: mujoco.MjModel | str | os.PathLike | None = None,
        **options: Any,
    ):
        for name in ("autoreset", "devices"):
            if name in options:
                raise ValueError(
                    f"TorchVecEnv does not take {name}=: it autoresets in the same step "
                    "and lives on one device (run one process per GPU)"
                )
        self._seed = checks.seed(seed)
        env = env_.make(task, num_envs, autoreset="same_step", model=model, **options)
        self._door = door.Door(env, _pack)
        self._out: dict[str, Any] = {}
        self.num_envs = env.num_envs
        self.num_actions = env.action_size
        self.max_episode_length = int(env.task.max_episode_steps)
        self.device = torch_device(env.config.backend.device)
        self._dtype = env.low.dtype
        low, high = (np.asarray(b, np.float32) for b in (env.low, env.high))
        self._whole = not isinstance(env.observation_spec, dict)  # one "policy" group
        spec = groups_of(env.observation_spec)
        self.single_observation_space = gymnasium.spaces.Dict(
            {k: gym_.term_space(s) for k, s in spec.items()}
        )
        self._outputs = door.Outputs(spec, self.num_envs, self._dtype)
        self.single_action_space = gymnasium.spaces.Box(low, high, low.shape, np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.unwrapped = self
        self.cfg: dict[str, Any] = {"task": env.task.name, "num_envs": self.num_envs}

    @property
    def env(self) -> env_.Env:
        """The functional :class:`~mjxrunner.env.Env` under this adapter."""
        return self._door.env

    @property
    def state(self) -> env_.EnvState:
        """The current :class:`~mjxrunner.env.EnvState` (JAX arrays)."""
        return self._door.state

    def set_param(self, path: str, values: Any, env_ids: Any = None) -> None:
        """Sets a model field for all worlds or per world (see
        :meth:`mjxrunner.MultiEnvRunner.set_param`); restarts keep the values."""
        self._door.env = self.env.with_param(path, values, env_ids)

    @property
    def ready(self) -> bool:
        """True once the worlds have been reset."""
        return self._door.ready

    def observations(self) -> dict[str, torch.Tensor]:
        """The current observation groups, ``{"policy": (num_envs, obs_dim)}`` (one
        entry per term for a task with observation terms)."""
        if "obs" not in self._out:  # after a reset: the state's own arrays
            obs = groups_of(self._door.get("obs"))
            self._out = {"obs": {k: _own(x) for k, x in obs.items()}}
        return dict(self._out["obs"])

    def _unpack(self, packed: tuple) -> dict[str, Any]:
        self._packed = packed
        floats, flags = (to_torch(x) for x in packed[:2])
        out = self._outputs.split(floats, flags, tuple(to_torch(x) for x in packed[2]))
        if self._whole:
            out["final_obs"] = out["final_obs"]["policy"]
        self._out = out
        return out

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Restarts every world; the PRNG streams restart from ``seed`` (None: the
        constructor's seed on the first reset, the running streams after it).

        Returns:
          ``({"policy": (num_envs, obs_dim) tensor}, {})``.
        """
        if options := checks.options(options):
            raise ValueError(f"reset takes no options, got {sorted(options)}")
        if seed is not None:
            seed = checks.seed(seed)
        norm = self.state.obs_norm if self._door.ready else None
        if seed is None and self._door.ready:
            state = env_.jit_reset_worlds(self.env, self.state, np.ones(self.num_envs, bool))
        else:
            key = jax.random.key(self._seed if seed is None else seed)
            state = env_.jit_reset(self.env, key, norm)
        self._door.state, self._out = state, {}
        return self.observations(), {}

    def _action(self, actions: Any) -> jax.Array:
        if not isinstance(actions, torch.Tensor):
            raise TypeError(f"actions must be a torch.Tensor, got {type(actions).__name__}")
        shape = (self.num_envs, self.num_actions)
        if tuple(actions.shape) != shape:
            raise ValueError(f"actions must have shape {shape}, got {tuple(actions.shape)}")
        if actions.dtype == torch.bool or actions.dtype.is_complex:
            raise TypeError(f"actions must be real numbers, got {actions.dtype}")
        if actions.device != self.device:
            raise ValueError(f"actions must be on {self.device}, got {actions.device}")
        want = torch.float64 if self._dtype == jnp.float64 else torch.float32
        actions = actions.detach()
        if actions.dtype != want:
            actions = actions.to(want)
        if self.device.type == "cpu":
            # A copy into XLA's buffer: on a CPU, importing the tensor's memory
            # through DLPack cost ~0.2 ms more per step than copying its few bytes.
            return actions.numpy().copy()
        return to_jax(actions)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Steps every world; worlds whose episode ended restart in this step.

        Args:
          actions: ``(num_envs, num_actions)`` real tensor on :attr:`device`;
            clipped to the action bounds. A NaN/Inf action is not checked here (that
            would wait for the device): the env's non-finite-action guard
            truncates that world and restarts it.

        Returns:
          ``(obs, reward, terminated, truncated, extras)``: ``obs`` a dict of
          ``(num_envs, obs_dim)`` tensors (one per group), ``reward`` ``(num_envs,)`` float,
          ``terminated``/``truncated`` ``(num_envs,)`` bool, ``extras`` with
          ``time_outs`` (= ``truncated``), ``final_obs`` and ``final_mask``.
        """
        if not self._door.ready:
            raise RuntimeError("call reset() before step()")
        out = self._unpack(self._door.step(self._action(actions)))
        extras = {
            "time_outs": out["truncated"],
            "final_obs": out["final_obs"],
            "final_mask": out["final_mask"],
        }
        return dict(out["obs"]), out["reward"], out["terminated"], out["truncated"], extras

    @property
    def episode_length(self) -> torch.Tensor:
        """``(num_envs,)`` int32 steps of each world's running episode (a copy: set them
        with :meth:`set_episode_length`)."""
        return _own(self._door.get("episode_length"))

    def set_episode_length(self, lengths: Any) -> None:
        """Sets each world's step count in its running episode (e.g. random counts,
        so that time limits do not fall on the same step everywhere); values in
        ``[0, max_episode_length]``."""
        if isinstance(lengths, torch.Tensor):
            lengths = lengths.detach().cpu()
            if lengths.dtype == torch.bfloat16:  # which NumPy has not
                lengths = lengths.float()
            lengths = lengths.numpy()
        lengths = checks.finite_array(lengths, "lengths", (self.num_envs,), np.float64)
        if (lengths < 0).any() or (lengths > self.max_episode_length).any():
            raise ValueError(f"lengths must lie in [0, {self.max_episode_length}]")
        if (lengths != np.round(lengths)).any():
            raise ValueError("lengths must be whole numbers of steps")
        self._door.state = env_.with_episode_length(self.state, lengths)

    def episode_statistics(self) -> dict[str, Any]:
        """NumPy episode statistics (see :func:`mjxrunner.env.episode_statistics`)."""
        return env_.episode_statistics(self.state)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the env and its state (see :func:`mjxrunner.env.save`)."""
        env_.save(path, self.env, self.state)

    def close(self) -> None:
        """Nothing to free: the arrays go with the object."""

    def __repr__(self) -> str:
        name, n = self.env.task.name, self.num_envs
        return f"TorchVecEnv({name!r}, num_envs={n}, device={self.device})"
