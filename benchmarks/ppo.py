"""PPO in pure JAX on the functional env: the whole training run is ONE jitted function.

Rollouts (``lax.scan`` over env steps), advantage estimation and the minibatch
updates (``lax.scan`` over epochs and minibatches) all live inside ``train(key)``,
so the host only starts it and reads the learning curve at the end. The env runs in
``"same_step"`` autoreset mode: ``final_obs`` lets the critic bootstrap from the last
observation of a time-limited (truncated) episode, while terminated episodes
bootstrap from zero.

    .venv/bin/python benchmarks/ppo.py                       # cartpole balance, ~1 M steps
    .venv/bin/python benchmarks/ppo.py --updates 20 --json   # shorter; JSON summary
    .venv/bin/python benchmarks/ppo.py --task ant_velocity --num-envs 256 \
        --normalize-obs --out curve.json                     # the ant's velocity tracking
    .venv/bin/python benchmarks/ppo.py --task ant_velocity --num-envs 256 \
        --normalize-obs --impl c --wall-time 300 --updates 1000 # 5 minutes of training

Prints the learning curve (mean return of the episodes that ended in each update),
the compile time and the training throughput in env steps per second (steady state,
compile excluded), with the backend identity.

``--impl`` picks the physics (``jax`` by default; ``c`` steps MuJoCo's C engine on
``--num-threads`` threads). ``--wall-time S`` trains for S seconds of wall time
instead of a fixed run: the updates go in jitted chunks of ``--chunk`` (the
learning-rate schedule still spans ``--updates``), and training stops at the end of
the chunk nearest S seconds, or after ``--updates``. Two impls given the
same S are compared at equal wall time (compile time is reported apart).

A task whose observation is a dict of terms (``mjxrunner.tasks.locomotion``) is fed
to the MLP as the float vector terms concatenated in sorted order. A task that logs
per-step metrics in ``info["metrics"]`` (the locomotion task's tracking errors) gets
their mean over each update's rollout in the curve. ``--latency`` and
``--push-interval``/``--push-speed`` pass the env's action latency and pushes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mjxrunner.engine.events import Latency, Pushes
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
      learning_rate: Adam's step size (annealed linearly to 0).
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
    max_grad_norm: float = 0.5
    hidden: int = 64
    init_log_std: float = -0.5
    normalize_obs: bool = False
    latency: tuple[int, int] | None = None
    pushes: tuple[int, int, float] | None = None
    impl: str = "jax"
    num_threads: int | None = None

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


def value(params: dict, obs: jax.Array) -> jax.Array:
    return _forward(params["critic"], obs)[..., 0]


def policy_mean(params: dict, obs: jax.Array) -> jax.Array:
    return _forward(params["actor"], obs)


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


def _loss(params: dict, batch: Transition, adv: jax.Array, target: jax.Array, config):
    mean = policy_mean(params, batch.obs)
    log_prob = _log_prob(mean, params["log_std"], batch.action)
    ratio = jnp.exp(log_prob - batch.log_prob)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    clipped = jnp.clip(ratio, 1 - config.clip, 1 + config.clip)
    policy_loss = -jnp.mean(jnp.minimum(ratio * adv, clipped * adv))
    value_loss = 0.5 * jnp.mean((value(params, batch.obs) - target) ** 2)
    entropy = jnp.sum(params["log_std"] + 0.5 * math.log(2 * math.pi * math.e))
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
    schedule = optax.linear_schedule(
        config.learning_rate, 0.0, config.num_updates * config.epochs * config.minibatches
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
        mean = policy_mean(params, obs)
        noise = jax.random.normal(k_act, mean.shape)
        action = mean + jnp.exp(params["log_std"]) * noise
        log_prob = _log_prob(mean, params["log_std"], action)
        nxt = env.step(state, action)  # the env clips the action to its bounds
        t = Transition(
            obs=obs,
            action=action,
            log_prob=log_prob,
            value=value(params, obs),
            reward=nxt.reward,
            next_value=value(params, flat_obs(nxt.final_obs)),
            terminated=nxt.terminated.astype(jnp.float32),
            done=nxt.done.astype(jnp.float32),
            episode_return=nxt.stats.last_return,
        )
        return (params, nxt, key), (t, logged(nxt))

    def update_minibatch(carry, mb):
        params, opt_state = carry
        grads, (pl, vl) = jax.grad(_loss, has_aux=True)(params, *mb, config)
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


def run(config: PPOConfig, seed: int) -> dict[str, Any]:
    """Compiles and runs ``train``; returns the curve, timings and throughput."""
    env, train = make_train(config)
    key = jax.random.key(seed)
    t0 = time.perf_counter()
    compiled = jax.jit(train).lower(key).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    params, metrics = jax.block_until_ready(compiled(key))
    train_s = time.perf_counter() - t0
    total_steps = config.num_updates * config.steps_per_update
    return {
        "config": dataclasses.asdict(config),
        "seed": seed,
        "compile_s": round(compile_s, 2),
        "train_s": round(train_s, 2),
        "env_steps": total_steps,
        "env_steps_per_s": round(total_steps / train_s),
        "mean_return": np.asarray(metrics["mean_return"]).tolist(),
        "episodes": np.asarray(metrics["episodes"]).astype(int).tolist(),
        "mean_reward": np.asarray(metrics["mean_reward"]).tolist(),
        **{k: np.asarray(v).tolist() for k, v in metrics.items() if k.startswith("info/")},
        "params": params,
        "backend": env.config.backend.info(),
    }


def run_for(config: PPOConfig, seed: int, wall_s: float, chunk: int = 5) -> dict[str, Any]:
    """Trains for ``wall_s`` seconds of wall time (compile apart), in jitted chunks of
    ``chunk`` updates, at most ``config.num_updates``, stopping at the end of the chunk
    nearest ``wall_s``; returns what :func:`run` does, plus ``wall_s`` (per update:
    seconds of training when its chunk ended)."""
    env, start, one_update = make_parts(config)

    def segment(carry):
        return jax.lax.scan(one_update, carry, None, length=chunk)

    key = jax.random.key(seed)
    t0 = time.perf_counter()
    carry = jax.block_until_ready(jax.jit(start)(key))
    step = jax.jit(segment, donate_argnums=0).lower(carry).compile()
    compile_s = time.perf_counter() - t0
    chunks, ends = [], []
    t0 = time.perf_counter()
    while len(chunks) * chunk < config.num_updates:
        carry, metrics = step(carry)
        chunks.append(jax.device_get(metrics))  # waits for the chunk
        ends.append(time.perf_counter() - t0)
        last = ends[-1] - (ends[-2] if len(ends) > 1 else 0.0)
        if ends[-1] + last / 2 >= wall_s:  # the chunk end nearest the budget
            break
    train_s = ends[-1]
    metrics = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    total_steps = len(chunks) * chunk * config.steps_per_update
    return {
        "config": dataclasses.asdict(config),
        "seed": seed,
        "compile_s": round(compile_s, 2),
        "train_s": round(train_s, 2),
        "wall_time_budget_s": wall_s,
        "updates_done": len(chunks) * chunk,
        "env_steps": total_steps,
        "env_steps_per_s": round(total_steps / train_s),
        "wall_s": [round(e, 2) for e in ends for _ in range(chunk)],
        "mean_return": np.asarray(metrics["mean_return"]).tolist(),
        "episodes": np.asarray(metrics["episodes"]).astype(int).tolist(),
        "mean_reward": np.asarray(metrics["mean_reward"]).tolist(),
        **{k: np.asarray(v).tolist() for k, v in metrics.items() if k.startswith("info/")},
        "params": carry[0],
        "backend": env.config.backend.info(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default=PPOConfig.task)
    parser.add_argument("--num-envs", type=int, default=PPOConfig.num_envs)
    parser.add_argument("--rollout-steps", type=int, default=PPOConfig.rollout_steps)
    parser.add_argument("--updates", type=int, default=PPOConfig.num_updates)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning-rate", type=float, default=PPOConfig.learning_rate)
    parser.add_argument("--entropy-coef", type=float, default=PPOConfig.entropy_coef)
    parser.add_argument("--hidden", type=int, default=PPOConfig.hidden)
    parser.add_argument("--epochs", type=int, default=PPOConfig.epochs)
    parser.add_argument("--minibatches", type=int, default=PPOConfig.minibatches)
    parser.add_argument("--normalize-obs", action="store_true")
    parser.add_argument("--latency", type=int, nargs=2, metavar=("LOW", "HIGH"))
    parser.add_argument("--push-interval", type=int, nargs=2, metavar=("FEWEST", "MOST"))
    parser.add_argument("--push-speed", type=float, default=0.5)
    parser.add_argument("--impl", default="jax", help="jax (default), warp, or c (cpp)")
    parser.add_argument("--num-threads", type=int, help="impl c's threads (default: every core)")
    parser.add_argument(
        "--wall-time", type=float, metavar="S", help="train for S seconds (see above)"
    )
    parser.add_argument("--chunk", type=int, default=5, help="updates per chunk of --wall-time")
    parser.add_argument(
        "--baseline-steps", type=int, default=500, help="steps of the random baseline (0: none)"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    parser.add_argument("--out", help="write the JSON summary to this file")
    args = parser.parse_args(argv)
    pushes = None
    if args.push_interval is not None:
        pushes = (*args.push_interval, args.push_speed)
    config = PPOConfig(
        task=args.task,
        num_envs=args.num_envs,
        rollout_steps=args.rollout_steps,
        num_updates=args.updates,
        learning_rate=args.learning_rate,
        entropy_coef=args.entropy_coef,
        hidden=args.hidden,
        epochs=args.epochs,
        minibatches=args.minibatches,
        normalize_obs=args.normalize_obs,
        latency=None if args.latency is None else tuple(args.latency),
        pushes=pushes,
        impl=args.impl,
        num_threads=args.num_threads,
    )
    if args.wall_time is not None:
        result = run_for(config, args.seed, args.wall_time, args.chunk)
    else:
        result = run(config, args.seed)
    baseline = float("nan")
    if args.baseline_steps:
        baseline = evaluate_random(config, jax.random.key(args.seed + 1), args.baseline_steps)
    curve = result["mean_return"]
    logged = sorted(k for k in result if k.startswith("info/"))
    print(f"PPO on {config.task}: {config.num_envs} worlds x {config.rollout_steps} steps/update")
    print(f"random policy: mean return {baseline:.1f}")
    if "wall_s" in result:
        print(f"trained {result['train_s']} s of a {args.wall_time} s budget: "
              f"{result['updates_done']} of {config.num_updates} updates")  # fmt: skip
    every = max(1, len(curve) // 25)
    for i in range(0, len(curve), every):
        extra = "".join(f"  {k[5:]} {result[k][i]:.3f}" for k in logged)
        print(f"update {i + 1:4d}  env steps {(i + 1) * config.steps_per_update:9d}  "
              f"mean return {curve[i]:8.1f}{extra}")  # fmt: skip
    tail = [r for r in curve[-10:] if not math.isnan(r)]
    final = float(np.mean(tail)) if tail else float("nan")
    print(f"final mean return (last 10 updates): {final:.1f}")
    print(f"compile {result['compile_s']} s; training {result['train_s']} s for "
          f"{result['env_steps']} env steps = {result['env_steps_per_s']} env steps/s")  # fmt: skip
    summary = {k: v for k, v in result.items() if k != "params"}
    summary.update(random_return=baseline, final_return=final)
    if args.json:
        print(json.dumps(summary))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
