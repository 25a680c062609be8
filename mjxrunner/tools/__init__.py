"""Tooling: the throughput harness (:mod:`.bench`), the command line (:mod:`.cli`) and
training (:mod:`.train`: train, play, export, sim2sim).

May import every layer below: :mod:`mjxrunner.engine`, :mod:`mjxrunner.kit`,
:mod:`mjxrunner.tasks`, :mod:`mjxrunner.rl` and :mod:`mjxrunner.doors`. Nothing
below imports from here.
"""
