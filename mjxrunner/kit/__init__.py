"""The kit: what tasks are built from, on top of the engine.

Owns observation terms, noise and history (:mod:`.observations`), running
observation normalization (:mod:`.normalize`), a task's mirror image for symmetric
policies (:mod:`.symmetry`), tiled terrain (:mod:`.terrain`),
batched pixel observations (:mod:`.pixels`) and host-side rendering and video
(:mod:`.render`).

May import: :mod:`mjxrunner.engine` and modules of this subpackage.
"""
