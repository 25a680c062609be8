"""A user's task is held to its contract when the env is built: each mistake below
used to train on garbage or fail deep inside a trace; now it is refused at ``make``
with an error naming the task, the function, what was expected and what came."""

import dataclasses

import jax.numpy as jnp
import pytest

from mjxrunner import tasks
from mjxrunner.rl import env as E

BASE = tasks.get("cartpole_balance")


def task_with(**functions):
    return dataclasses.replace(BASE, name="my_task", **functions)


def make(task):
    return E.make(task, 2, impl="c")


def reward_of_shape_one(model, data, action, next_data):
    return jnp.ones((1,))


def float_terminated(model, data):
    return jnp.float32(0.0)


def terminated_of_shape_one(model, data):
    return jnp.zeros((1,), bool)


def short_qpos(model, data, key):
    return data.replace(qpos=data.qpos[:1])


def reward_without_next_data(model, data, action):
    return jnp.float32(0.0)


def observation_as_a_matrix(model, data):
    return jnp.zeros((2, 2))


def start_that_is_not_data(model, data, key):
    return data.qpos


def int_reward(model, data, action, next_data):
    return jnp.int32(1)


@pytest.mark.parametrize(
    ("functions", "error", "words"),
    [
        ({"reward": reward_of_shape_one}, ValueError, ["reward(model, data, action", "()", "[1]"]),
        ({"reward": int_reward}, TypeError, ["reward(", "float scalar", "int32"]),
        ({"terminated": float_terminated}, TypeError, ["terminated(model, data)", "bool"]),
        ({"terminated": terminated_of_shape_one}, ValueError, ["terminated(", "()", "bool[1]"]),
        ({"initial_state": short_qpos}, ValueError, ["initial_state(", ".qpos", "[1]", "[2]"]),
        ({"initial_state": start_that_is_not_data}, TypeError, ["initial_state(", "mjx.Data"]),
        (
            {"reward": reward_without_next_data},
            TypeError,
            ["reward must accept reward(model, data, action, next_data)", "(model, data, action)"],
        ),
        ({"observation": observation_as_a_matrix}, ValueError, ["observation(", "float32[2, 2]"]),
    ],
)
def test_a_broken_task_is_refused_at_make_naming_what_is_wrong(functions, error, words):
    with pytest.raises(error) as caught:
        make(task_with(**functions))
    message = str(caught.value)
    assert "task 'my_task'" in message
    for word in words:
        assert word in message, (word, message)


def test_task_state_keeps_its_structure():
    def initial_info(model, data, key):
        return {"command": jnp.zeros(2)}

    def observation(model, data, info):
        return jnp.concatenate([data.qpos, info["command"]])

    def reward(model, data, action, next_data, info):
        return jnp.float32(0.0)

    def terminated(model, data, info):
        return jnp.zeros((), bool)

    def grows(model, data, action, next_data, info, key):
        return {"command": jnp.zeros(3)}

    ok = task_with(
        initial_info=initial_info, observation=observation, reward=reward, terminated=terminated
    )
    assert make(ok).task.name == "my_task"  # the info's functions take their info
    with pytest.raises(ValueError, match=r"update_info\(.*\['command'\] as float32\[3\]"):
        make(dataclasses.replace(ok, update_info=grows))
    with pytest.raises(
        TypeError, match=r"reward must accept reward\(model, data, action, next_data, info\)"
    ):
        make(dataclasses.replace(ok, reward=reward_of_shape_one))
