"""Tooling around mjxrunner that is not part of the engine.

The engine (runner, env, core and what they build on) never imports from here;
modules here may import the engine. :mod:`mjxrunner.tools.bench` is the throughput
harness behind ``mjxrunner bench`` and ``benchmarks/``.
"""
