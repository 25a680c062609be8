"""PPO in pure JAX on the functional env, purejaxrl-style: a training run is one
jitted program.

Rollouts (``lax.scan`` over env steps), advantage estimation and the minibatch
updates (``lax.scan`` over epochs and minibatches) are all inside one update
(:func:`make_parts`), and updates are scanned in chunks, so the host only starts a
chunk and reads its metrics. The env runs in ``"same_step"`` autoreset mode:
``final_obs`` lets the critic bootstrap from the last observation of a time-limited
(truncated) episode, while terminated episodes bootstrap from zero.

A task whose observation is a dict of terms (:mod:`mjxrunner.tasks.locomotion`) is
fed to the MLP as its float vector terms concatenated in sorted order
(:func:`flat_obs`). The policy is a Gaussian whose mean is an MLP of the
observation; :func:`act` is its deterministic action, what ``play`` and the ONNX
export run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mjxrunner.engine.events import Latency, Pushes
from mjxrunner.kit.symmetry import Flip
from mjxrunner.rl import env as E


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Hyper-parameters; every field is static (a change recompiles).

    Attributes:
      task: registered task name.
      num_envs: parallel worlds.
      rollout_steps: env steps per world between updates.
      num_updates: rollout + update rounds; total env steps is their product.
      epochs: passes over each rollout.
      minibatches: minibatches per epoch.
      gamma: discount.
      gae_lambda: GAE's lambda.
      clip: PPO's ratio clip.
      value_coef: weight of the value loss.
      entropy_coef: weight of the entropy bonus.
      learning_rate: Adam's step size at the start, annealed linearly to
        ``final_learning_rate`` over the run.
      final_learning_rate: the step size at the end of the run.
      max_grad_norm: global gradient-norm clip.
      hidden: width of the two hidden layers of actor and critic.
      init_log_std: initial log standard deviation of the Gaussian policy.
      normalize_obs: normalize observations by running statistics on device
        (``mjxrunner.env.make(normalize_obs=True)``).
      latency: None, or ``(low, high)`` control steps of action latency.
      pushes: None, or ``(fewest, most, speed)``: horizontal kicks of up to ``speed``
        m/s on the first free joint every ``fewest`` to ``most`` steps.
      impl: the env's physics, ``"jax"``, ``"warp"`` or ``"c"``.
      num_threads: impl ``"c"``'s threads (None: every core).
      symmetric: a mirror-symmetric actor and critic (:func:`symmetry_of`), for a
        task with a mirror image (``Task.mirror``).
    """

    task: str = "cartpole_balance"
    num_envs: int = 128
    rollout_steps: int = 32
    num_updates: int = 250
    epochs: int = 4
    minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.0
    learning_rate: float = 1e-3
    final_learning_rate: float = 0.0
    max_grad_norm: float = 0.5
    hidden: int = 64
    init_log_std: float = -0.5
    normalize_obs: bool = False
    latency: tuple[int, int] | None = None
    pushes: tuple[int, int, float] | None = None
    impl: str = "jax"
    num_threads: int | None = None
    symmetric: bool = False

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.rollout_steps

    def make_env(self) -> E.Env:
        """The training env: ``"same_step"`` autoreset and the options above."""
        options = {}
        if self.latency is not None:
            options["latency"] = Latency(*self.latency)
        if self.pushes is not None:
            fewest, most, speed = self.pushes
            kick = ((-speed, speed), (-speed, speed))
            options["pushes"] = Pushes(interval=(fewest, most), velocity=kick)
        if self.num_threads is not None:
            options["num_threads"] = self.num_threads
        return E.make(
            self.task,
            self.num_envs,
            autoreset="same_step",
            normalize_obs=self.normalize_obs,
            impl=self.impl,
            **options,
        )


_LEGGED_ON_CPU = {
    "num_envs": 1024,
    "rollout_steps": 24,
    "hidden": 128,
    "epochs": 2,
    "learning_rate": 1e-3,
    "final_learning_rate": 5e-4,
    "init_log_std": -1.2,
    "normalize_obs": True,
    "symmetric": True,
}

SUGGESTED = {
    "go1_joystick": {**_LEGGED_ON_CPU, "steps": 12_000_000},
    "g1_joystick": {**_LEGGED_ON_CPU, "steps": 40_000_000},
}
"""``mjxrunner train`` options a task trains well with, taken where none is given
(and printed). ``go1_joystick`` walks with them after minutes on 2 cores
(``benchmarks/results/go1_walk.md``), ``g1_joystick`` walks, turns and stands after
half an hour (``g1_walk.md``): 1,024 worlds, 24-step rollouts, two epochs of four
minibatches, 128-wide MLPs, a symmetric policy, an initial noise of 0.3 rad, the
step size decaying from 1e-3 to 5e-4. Two epochs rather than four: per env step the
second pair learned a little more (velocity error 0.098 against 0.128 m/s after 5.9 M
steps), per second of training less (29.8 k against 24.4 k env steps/s)."""


# --- observations --------------------------------------------------------------------


def observation_size(spec: Any) -> int:
    """Length of the policy's input for one world's observation ``spec``."""
    return sum(math.prod(s.shape) for s in _terms(spec))


def flat_obs(obs: Any) -> jax.Array:
    """``(..., obs_dim)``: an array observation as it is; a dict of terms as its
    float vector terms concatenated in sorted order."""
    if not isinstance(obs, dict):
        return obs
    return jnp.concatenate([obs[k] for k in sorted(obs)], axis=-1)


def _terms(spec: Any) -> list:
    if not isinstance(spec, dict):
        return [spec]
    for name, s in spec.items():
        if len(s.shape) != 1 or not jnp.issubdtype(s.dtype, jnp.floating):
            raise TypeError(f"the MLP takes float vector terms; term {name!r} is {s}")
    return [spec[k] for k in sorted(spec)]


# --- symmetry ------------------------------------------------------------------------


class Symmetry(NamedTuple):
    """A task's mirror image on the policy's flat input and output: ``obs @ self.obs``
    and ``action @ self.action`` (signed permutation matrices, so that the ONNX
    export writes products, not gathers)."""

    obs: jax.Array  # (obs_dim, obs_dim)
    action: jax.Array  # (act_dim, act_dim)


def symmetry_of(task: Any, spec: Any) -> Symmetry:
    """The mirror of ``task`` (``Task.mirror``) on observations of ``spec`` as
    :func:`flat_obs` concatenates them.

    Raises:
      ValueError: the task has no mirror image.
    """
    if task.mirror is None:
        raise ValueError(
            f"a symmetric policy needs a task with a mirror image (Task.mirror); task "
            f"{task.name!r} has none"
        )
    # the flat mirror, found by mirroring each entry's own number (1-based, signed)
    numbered, offset = {}, 1
    for k, s in sorted(spec.items()) if isinstance(spec, dict) else [("", spec)]:
        size = math.prod(s.shape)
        numbered[k] = np.arange(offset, offset + size, dtype=np.float32)
        offset += size
    obs = numbered if isinstance(spec, dict) else numbered[""]
    image = np.asarray(flat_obs(task.mirror.observation(jax.tree.map(jnp.asarray, obs))))
    flip = Flip(tuple(np.abs(image).astype(int) - 1), tuple(np.sign(image)))
    return Symmetry(obs=jnp.asarray(flip.matrix()), action=jnp.asarray(task.mirror.action.matrix()))


def symmetry_for(config: PPOConfig, env: Any) -> Symmetry | None:
    """The run's :class:`Symmetry`, None unless ``config.symmetric``."""
    return symmetry_of(env.task, env.observation_spec) if config.symmetric else None


# --- the actor-critic ------------------------------------------------------------------


def _dense(key: jax.Array, n_in: int, n_out: int, scale: float) -> dict:
    w = jax.nn.initializers.orthogonal(scale)(key, (n_in, n_out), jnp.float32)
    return {"w": w, "b": jnp.zeros((n_out,), jnp.float32)}


def _mlp(key: jax.Array, sizes: list[int], out_scale: float) -> list[dict]:
    keys = jax.random.split(key, len(sizes) - 1)
    scales = [math.sqrt(2)] * (len(sizes) - 2) + [out_scale]
    return [
        _dense(k, a, b, s) for k, a, b, s in zip(keys, sizes[:-1], sizes[1:], scales, strict=True)
    ]


def _forward(layers: list[dict], x: jax.Array) -> jax.Array:
    for layer in layers[:-1]:
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return x @ layers[-1]["w"] + layers[-1]["b"]


def init_params(key: jax.Array, obs_dim: int, act_dim: int, config: PPOConfig) -> dict:
    """Actor (mean of a Gaussian), state-independent log std, critic."""
    k_actor, k_critic = jax.random.split(key)
    h = config.hidden
    return {
        "actor": _mlp(k_actor, [obs_dim, h, h, act_dim], 0.01),  # near-zero mean at start
        "log_std": jnp.full((act_dim,), config.init_log_std, jnp.float32),
        "critic": _mlp(k_critic, [obs_dim, h, h, 1], 1.0),
    }


def _log_prob(mean: jax.Array, log_std: jax.Array, action: jax.Array) -> jax.Array:
    z = (action - mean) / jnp.exp(log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi), axis=-1)


def value(params: dict, obs: jax.Array, symmetry: Symmetry | None = None) -> jax.Array:
    """The critic; with ``symmetry``, the mean of its values of ``obs`` and of its
    mirror image (a state and its image are worth the same)."""
    v = _forward(params["critic"], obs)[..., 0]
    if symmetry is None:
        return v
    return 0.5 * (v + _forward(params["critic"], obs @ symmetry.obs)[..., 0])


def policy_mean(params: dict, obs: jax.Array, symmetry: Symmetry | None = None) -> jax.Array:
    """The actor's mean; with ``symmetry``, the mean of its answer and the mirror image
    of its answer to the mirrored observation, so that the image of a state gets the
    image of its action exactly."""
    mean = _forward(params["actor"], obs)
    if symmetry is None:
        return mean
    return 0.5 * (mean + _forward(params["actor"], obs @ symmetry.obs) @ symmetry.action)


def log_std(params: dict, symmetry: Symmetry | None = None) -> jax.Array:
    """The policy's log standard deviation; with ``symmetry``, equal on mirrored
    actuators."""
    if symmetry is None:
        return params["log_std"]
    return 0.5 * (params["log_std"] + params["log_std"] @ jnp.abs(symmetry.action))


# --- training ----------------------------------------------------------------------------


class Transition(NamedTuple):
    """One env step of every world; each field ``(num_envs, ...)``."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    next_value: jax.Array  # critic at the step's final observation (before restart)
    terminated: jax.Array
    done: jax.Array
    episode_return: jax.Array  # return of the episode that ended here (where done)


def _advantages(t: Transition, config: PPOConfig) -> tuple[jax.Array, jax.Array]:
    """GAE over a ``(rollout_steps, num_envs)`` rollout; truncation bootstraps."""

    def backward(gae, x):
        delta = x.reward + config.gamma * x.next_value * (1 - x.terminated) - x.value
        gae = delta + config.gamma * config.gae_lambda * (1 - x.done) * gae
        return gae, gae

    _, adv = jax.lax.scan(backward, jnp.zeros_like(t.value[0]), t, reverse=True)
    return adv, adv + t.value


def _loss(params: dict, batch: Transition, adv: jax.Array, target: jax.Array, config, symmetry):
    mean = policy_mean(params, batch.obs, symmetry)
    std = log_std(params, symmetry)
    log_prob = _log_prob(mean, std, batch.action)
    ratio = jnp.exp(log_prob - batch.log_prob)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    clipped = jnp.clip(ratio, 1 - config.clip, 1 + config.clip)
    policy_loss = -jnp.mean(jnp.minimum(ratio * adv, clipped * adv))
    value_loss = 0.5 * jnp.mean((value(params, batch.obs, symmetry) - target) ** 2)
    entropy = jnp.sum(std + 0.5 * math.log(2 * math.pi * math.e))
    total = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy
    return total, (policy_loss, value_loss)


def make_train(config: PPOConfig):
    """``(env, train)``: ``train(key) -> (params, metrics)`` is pure and jit-able.

    ``metrics`` holds ``(num_updates,)`` arrays: ``mean_return`` (mean return of the
    episodes that ended during that update's rollout, NaN if none), ``episodes``,
    ``mean_reward`` (per step, over the rollout), ``policy_loss`` and ``value_loss``;
    for a task that logs ``info["metrics"]``, each of those as ``info/<name>``, its
    mean over the rollout's steps and worlds.
    """
    env, start, one_update = make_parts(config)

    def train(key: jax.Array) -> tuple[dict, dict]:
        carry = start(key)
        (params, *_), metrics = jax.lax.scan(one_update, carry, None, length=config.num_updates)
        return params, metrics

    return env, train


def make_parts(config: PPOConfig):
    """``(env, start, one_update)``: ``start(key) -> carry`` and ``one_update(carry,
    None) -> (carry, metrics)``, pure, that :func:`make_train` scans; the carry is
    ``(params, opt_state, env_state, key)``."""
    env = config.make_env()
    obs_dim, act_dim = observation_size(env.observation_spec), env.action_size
    batch = config.steps_per_update
    if batch % config.minibatches:
        raise ValueError("num_envs * rollout_steps must be divisible by minibatches")
    symmetry = symmetry_for(config, env)
    schedule = optax.linear_schedule(
        config.learning_rate,
        config.final_learning_rate,
        config.num_updates * config.epochs * config.minibatches,
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.adam(schedule, eps=1e-5)
    )

    def logged(state: E.EnvState) -> dict:
        """The task's per-step metrics, averaged over the worlds."""
        info = state.info
        if not (isinstance(info, dict) and isinstance(info.get("metrics"), dict)):
            return {}
        return {f"info/{k}": jnp.mean(v) for k, v in info["metrics"].items()}

    def env_step(carry, _):
        params, state, key = carry
        key, k_act = jax.random.split(key)
        obs = flat_obs(state.obs)
        mean = policy_mean(params, obs, symmetry)
        std = log_std(params, symmetry)
        noise = jax.random.normal(k_act, mean.shape)
        action = mean + jnp.exp(std) * noise
        log_prob = _log_prob(mean, std, action)
        nxt = env.step(state, action)  # the env clips the action to its bounds
        t = Transition(
            obs=obs,
            action=action,
            log_prob=log_prob,
            value=value(params, obs, symmetry),
            reward=nxt.reward,
            next_value=value(params, flat_obs(nxt.final_obs), symmetry),
            terminated=nxt.terminated.astype(jnp.float32),
            done=nxt.done.astype(jnp.float32),
            episode_return=nxt.stats.last_return,
        )
        return (params, nxt, key), (t, logged(nxt))

    def update_minibatch(carry, mb):
        params, opt_state = carry
        grads, (pl, vl) = jax.grad(_loss, has_aux=True)(params, *mb, config, symmetry)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (pl, vl)

    def update_epoch(carry, key, flat, adv, target):
        order = jax.random.permutation(key, batch)
        shaped = jax.tree.map(
            lambda x: x[order].reshape(config.minibatches, -1, *x.shape[1:]),
            (flat, adv, target),
        )
        return jax.lax.scan(update_minibatch, carry, shaped)

    def one_update(carry, _):
        params, opt_state, state, key = carry
        (params, state, key), (t, logs) = jax.lax.scan(
            env_step, (params, state, key), None, length=config.rollout_steps
        )
        adv, target = _advantages(t, config)
        flat, adv, target = jax.tree.map(lambda x: x.reshape(batch, *x.shape[2:]), (t, adv, target))
        key, *epoch_keys = jax.random.split(key, config.epochs + 1)
        (params, opt_state), (pl, vl) = jax.lax.scan(
            lambda c, k: update_epoch(c, k, flat, adv, target),
            (params, opt_state),
            jnp.stack(epoch_keys),
        )
        episodes = t.done.sum()
        metrics = {
            "mean_return": jnp.where(
                episodes > 0, (t.done * t.episode_return).sum() / episodes, jnp.nan
            ),
            "episodes": episodes,
            "mean_reward": t.reward.mean(),
            "policy_loss": pl.mean(),
            "value_loss": vl.mean(),
            **{k: v.mean() for k, v in logs.items()},
        }
        return (params, opt_state, state, key), metrics

    def start(key: jax.Array) -> tuple:
        k_params, k_env, key = jax.random.split(key, 3)
        params = init_params(k_params, obs_dim, act_dim, config)
        state = env.reset(k_env)
        return (params, optimizer.init(params), state, key)

    return env, start, one_update


def evaluate_random(config: PPOConfig, key: jax.Array, steps: int) -> float:
    """Mean return of a uniformly random policy over ``steps`` env steps (a baseline)."""
    env = config.make_env()

    def body(state, k):
        u = jax.random.uniform(k, (env.num_envs, env.action_size), minval=env.low, maxval=env.high)
        return env.step(state, u), None

    k_env, k_act = jax.random.split(key)
    state, _ = jax.lax.scan(body, env.reset(k_env), jax.random.split(k_act, steps))
    return E.episode_statistics(state)["mean_return"]


def act(
    params: dict, obs: Any, low: jax.Array, high: jax.Array, symmetry: Symmetry | None = None
) -> jax.Array:
    """The deterministic action of observations ``obs`` (as the env gives them, leading
    axes kept): the Gaussian's mean, clipped to the action bounds as the env would;
    ``symmetry``: the run's (:func:`symmetry_for`)."""
    return jnp.clip(policy_mean(params, flat_obs(obs), symmetry), low, high)
