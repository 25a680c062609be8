"""Tooling: the throughput harness (:mod:`.bench`) and the command line (:mod:`.cli`).

May import every layer below: :mod:`mjxrunner.engine`, :mod:`mjxrunner.kit`,
:mod:`mjxrunner.tasks`, :mod:`mjxrunner.rl` and :mod:`mjxrunner.doors`. Nothing
below imports from here.
"""
