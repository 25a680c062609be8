"""engine.Options: one dataclass of the engine's options, through every door."""

import dataclasses
import json

import pytest

from mjxrunner import MultiEnvRunner
from mjxrunner.doors.group_runner import GroupRunner
from mjxrunner.engine import backend, configure, events, guards, models, options
from mjxrunner.engine.options import ENV, RUNNER, Options
from mjxrunner.rl import env as env_


def test_keywords_change_the_doors_defaults():
    assert RUNNER.overflow_policy == "raise" and ENV.overflow_policy == "truncate"
    opts = options.of(ENV, None, max_qvel=5.0, guards=[guards.nonfinite_action()])
    assert opts.overflow_policy == "truncate" and opts.max_qvel == 5.0
    assert isinstance(opts.guards, tuple)  # hashable: the configuration is static
    hash(opts)
    given = Options(impl="jax", max_qvel=2.0)
    assert options.of(ENV, given, nvmax=3) == dataclasses.replace(given, nvmax=3)


def test_unknown_names_and_wrong_types_are_refused():
    with pytest.raises(TypeError, match=r"unknown engine option\(s\) \['max_vel'\]"):
        options.of(RUNNER, None, max_vel=1.0)
    with pytest.raises(TypeError, match=r"options must be a mjxrunner\.engine\.Options"):
        options.of(RUNNER, {"impl": "jax"})
    with pytest.raises(TypeError, match="unknown engine option"):
        MultiEnvRunner("cartpole", 2, max_vel=1.0)


def test_reset_is_the_old_name_of_truncate():
    with pytest.warns(DeprecationWarning, match='"reset" is deprecated'):
        opts = options.of(RUNNER, None, instability_policy="reset")
    assert opts.instability_policy == "truncate"
    assert RUNNER.instability_policy == "truncate"


def test_the_header_round_trip_is_json():
    opts = Options(
        max_qvel=7.0,
        instability_policy="warn",
        latency=events.Latency(1, 2),
        pushes=events.Pushes(interval=(5, 10), velocity=((-0.5, 0.5),)),
        collision_enabled=False,
    )
    header = json.loads(json.dumps(opts.to_header()))
    assert set(options.HEADER_KEYS) <= set(header)
    back = Options.from_header(header)
    assert back == dataclasses.replace(opts, latency=events.check_latency(opts.latency))


def test_old_headers_lack_the_newer_fields():
    old = {"options": {"impl": "jax", "graph_mode": None}, "overflow_policy": "raise"}
    old |= {"instability_policy": "reset", "max_qvel": 1e10}
    back = Options.from_header(old)  # files of the runner's older default
    assert back.instability_policy == "truncate" and back.latency is None
    assert back.collision_enabled


def test_configure_keeps_the_options_it_was_built_from():
    m = models.load("cartpole")
    config = configure(m, 4, Options(max_qvel=3.0), instability_policy="warn")
    assert config.options.max_qvel == 3.0 and config.options.instability_policy == "warn"
    unstable = guards.find(config.guards, "unstable")
    assert unstable.policy == "warn" and unstable.detect.max_qvel == 3.0
    # impl "jax" cannot overflow: its guard truncates on device, the option stays asked
    assert guards.find(config.guards, "overflow").policy == "truncate"
    assert config.options.overflow_policy == "raise"


def test_every_door_takes_options_or_their_names():
    r = MultiEnvRunner("cartpole", 2, options=Options(max_qvel=4.0), instability_policy="warn")
    assert r.max_qvel == 4.0 and r.instability_policy == "warn" and r.options.max_qvel == 4.0
    e = env_.make("cartpole_balance", 2, options=Options(max_qvel=4.0))
    assert e.config.options.max_qvel == 4.0
    assert e.config.options.overflow_policy == "raise"  # the given options, not ENV's


def test_the_header_follows_the_fields_metadata():
    saved = {f.name for f in dataclasses.fields(Options) if options.SAVED in f.metadata}
    assert saved == set(options.NAMES) - {"device", "guards"}  # a device and functions: not saved
    header = Options().to_header()
    fields = {f.name: f for f in dataclasses.fields(Options)}
    backend_fields = {n for n in saved if fields[n].metadata[options.SAVED].backend}
    assert set(header["options"]) == backend_fields
    assert set(header) == {"options"} | (saved - backend_fields)
    assert options.HEADER_KEYS == ("options", "overflow_policy", "instability_policy", "max_qvel")


def test_the_backend_is_made_from_the_options_record():
    m = models.load("cartpole")
    b = backend.Backend.make(m, 4, Options(impl="cpp", num_threads=1))
    assert (b.impl, b.num_threads, b.caps) == ("c", 1, None)
    resolved = b.resolved(Options(impl="cpp", max_qvel=3.0))
    assert (resolved.impl, resolved.num_threads, resolved.max_qvel) == ("c", 1, 3.0)
    # each impl reads its own fields of the record and ignores the others'
    assert backend.Backend.make(m, 4, Options(num_threads=3, naconmax=9)).num_threads is None
    with pytest.raises(ValueError, match="num_threads must be"):
        backend.Backend.make(m, 4, Options(impl="c", num_threads=0))


def test_groups_share_one_impl_given_once():
    runner = GroupRunner([("cartpole", 2), ("pendulum", 2)], impl="c")
    assert [g.impl for g in runner.groups] == ["c", "c"]
    with pytest.raises(ValueError, match="'impl' is shared by every group; pass it once"):
        GroupRunner([("cartpole", 2, {"impl": "c"}), ("cartpole", 2)])
