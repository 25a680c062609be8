"""Trains cartpole balance with a real third-party trainer through our adapter, in a
process of its own (test_trainers.py starts one per trainer as a background job).

Usage: ``python trainers_script.py {rsl_rl,skrl,brax,sac} OUT_DIR``. Writes
``OUT_DIR/result.json``: the mean return of a uniformly random policy and of the
trained policy (deterministic), each over the episodes that end within one time
limit of 64 worlds, measured through the same adapter, plus the training time.
"""

import json
import os
import sys
import time
from pathlib import Path

import conftest  # noqa: F401  (the suite's JAX cache and XLA flags)
import jax
import numpy as np

from mjxrunner import tasks
from mjxrunner.rl import env as E

TASK = tasks.get("cartpole_balance").replace(max_episode_steps=200)
NUM_ENVS = 64
SEED = 0
# Every door steps MuJoCo's C engine: the doors, not the physics, are tested here. Brax's
# trainers trace the env into their own programs, where impl "c" is one host call.
IMPL = "c"


def mean_return(env: E.Env, act, key: int) -> float:
    """Mean return of the first episode of each of the env's worlds under ``act(obs)``
    (``autoreset="disabled"``: one episode per world, ``TASK.max_episode_steps`` at
    most)."""
    env = env.with_autoreset("disabled")
    s = E.jit_reset(env, jax.random.key(key))
    for _ in range(TASK.max_episode_steps):
        s = E.jit_step(env, s, act(s.obs))
    stats = E.episode_statistics(s)
    assert stats["episodes"] == env.num_envs  # every world ended (fell or timed out)
    return float(stats["mean_return"])


def random_return(env: E.Env) -> float:
    rng = np.random.default_rng(SEED)
    return mean_return(env, lambda obs: rng.uniform(-1, 1, (obs.shape[0], 1)), key=1)


def rsl_rl() -> tuple[float, float]:
    import torch
    from rsl_rl.runners import OnPolicyRunner

    from mjxrunner.doors.rsl_rl import RslRlVecEnv

    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # as in the suite (conftest): the other core is busy
    vec = RslRlVecEnv(TASK, NUM_ENVS, seed=SEED, impl=IMPL)
    mlp = {"class_name": "MLPModel", "hidden_dims": [64, 64], "activation": "elu"}
    cfg = {
        "num_steps_per_env": 32,
        "save_interval": 10_000,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": 5,
            "num_mini_batches": 4,
            "learning_rate": 1e-3,
            "entropy_coef": 0.0,
        },
        "actor": {
            **mlp,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},
        },
        "critic": mlp,
    }
    runner = OnPolicyRunner(vec, cfg, log_dir=None, device="cpu")
    start = time.perf_counter()
    runner.learn(num_learning_iterations=40, init_at_random_ep_len=True)
    seconds = time.perf_counter() - start
    policy = runner.get_inference_policy(device="cpu")

    def act(obs):
        groups = vec._groups({"policy": torch.from_dlpack(obs)}, NUM_ENVS)
        with torch.inference_mode():
            return np.asarray(policy(groups).clamp(-1, 1))

    return mean_return(vec.env.env, act, key=2), seconds


def skrl() -> tuple[float, float]:
    import torch
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
    from skrl.resources.preprocessors.torch import RunningStandardScaler
    from skrl.trainers.torch import SequentialTrainer

    from mjxrunner.doors.torch import TorchVecEnv

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    door = TorchVecEnv(TASK, NUM_ENVS, seed=SEED, impl=IMPL)
    env = wrap_env(door, wrapper="isaaclab", verbose=False)

    def mlp(n_in: int, n_out: int) -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(n_in, 64), torch.nn.ELU(), torch.nn.Linear(64, 64), torch.nn.ELU(),
            torch.nn.Linear(64, n_out),
        )  # fmt: skip

    class Policy(GaussianMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(
                self, observation_space=observation_space, action_space=action_space, device=device
            )
            GaussianMixin.__init__(self, clip_actions=False)  # the env clips to ctrlrange
            self.net = mlp(self.num_observations, self.num_actions)
            self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {"log_std": self.log_std}

    class Value(DeterministicMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(
                self, observation_space=observation_space, action_space=action_space, device=device
            )
            DeterministicMixin.__init__(self)
            self.net = mlp(self.num_observations, 1)

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    spaces = (env.observation_space, env.action_space, env.device)
    models = {"policy": Policy(*spaces), "value": Value(*spaces)}
    memory = RandomMemory(memory_size=32, num_envs=env.num_envs, device=env.device)
    cfg = PPO_CFG(
        rollouts=32,
        learning_epochs=5,
        mini_batches=4,
        learning_rate=1e-3,
        value_preprocessor=RunningStandardScaler,
        value_preprocessor_kwargs={"size": 1, "device": env.device},
        time_limit_bootstrap=True,  # truncated steps bootstrap from the next value
    )
    cfg.experiment.write_interval = cfg.experiment.checkpoint_interval = 0  # no files
    agent = PPO(
        models=models,
        memory=memory,
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=env.device,
        cfg=cfg,
    )
    trainer = SequentialTrainer(
        env=env,
        agents=agent,
        cfg={"timesteps": 1280, "headless": True, "disable_progressbar": True},
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    net = models["policy"].net

    def act(obs):
        with torch.inference_mode():
            return np.asarray(net(torch.from_dlpack(obs)).clamp(-1, 1))

    return mean_return(env._unwrapped.env, act, key=2), seconds


def brax() -> tuple[float, float]:
    from brax.training.agents.ppo import train as ppo

    from mjxrunner.doors.brax import BraxEnv, wrap_env_fn

    env = BraxEnv(TASK, impl=IMPL)
    start = time.perf_counter()
    make_policy, params, _ = ppo.train(
        environment=env,
        wrap_env_fn=wrap_env_fn,
        num_timesteps=100_000,
        episode_length=TASK.max_episode_steps,
        action_repeat=1,
        num_envs=NUM_ENVS,
        num_eval_envs=NUM_ENVS,
        num_evals=1,
        unroll_length=16,
        batch_size=64,
        num_minibatches=4,
        num_updates_per_batch=4,
        learning_rate=1e-3,
        entropy_cost=1e-3,
        discounting=0.99,
        seed=SEED,
    )
    seconds = time.perf_counter() - start
    policy = jax.jit(make_policy(params, deterministic=True))
    key = jax.random.key(0)

    def act(obs):  # Brax's policies act in [-1, 1], as BraxEnv maps them
        return policy(obs, key)[0]

    return mean_return(env.env_for(NUM_ENVS), act, key=2), seconds


def sac() -> tuple[float, float]:
    """Brax's SAC accepts the env and runs (briefly: it is not asked to learn here)."""
    from brax.training.agents.sac import train as sac_train

    from mjxrunner.doors.brax import BraxEnv, wrap_env_fn

    env = BraxEnv(TASK, impl=IMPL)
    start = time.perf_counter()
    _, _, metrics = sac_train.train(
        environment=env,
        wrap_env_fn=wrap_env_fn,
        num_timesteps=2048,
        episode_length=TASK.max_episode_steps,
        num_envs=NUM_ENVS,
        num_eval_envs=NUM_ENVS,
        num_evals=1,  # one epoch, then Brax's evaluator: whole episodes of the env
        batch_size=64,
        min_replay_size=128,
        max_replay_size=4096,
        seed=SEED,
    )
    seconds = time.perf_counter() - start
    return float(metrics["eval/episode_reward"]), seconds


if __name__ == "__main__":
    trainer, out = sys.argv[1], Path(sys.argv[2]).resolve()
    os.chdir(out)  # whatever a trainer writes (logs, checkpoints) lands in the job's folder
    trained, seconds = {"rsl_rl": rsl_rl, "skrl": skrl, "brax": brax, "sac": sac}[trainer]()
    baseline = random_return(E.make(TASK, NUM_ENVS, impl=IMPL))
    result = {"trainer": trainer, "random": baseline, "trained": trained, "seconds": seconds}
    (out / "result.json").write_text(json.dumps(result))
    print(json.dumps(result))
