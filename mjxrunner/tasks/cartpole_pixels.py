"""Cart-pole from pixels: the balance and swing-up tasks of :mod:`.cartpole`, observed
only through the ``"side"`` camera.

Each world's observation is ``{"pixels": (3, 64, 64, 3) uint8}``: the last three
RGB frames, oldest first (frame stacking is the history of the ``"pixels"`` term, so
velocities can be read from it). A restarted world's stack holds three copies of its
first frame. Dynamics, rewards, terminations and starts are those of the state tasks.
Rendering needs impl ``"warp"``: ``mjxrunner.env.make("cartpole_balance_pixels", n,
impl="warp")``; the Gymnasium ids default to it.
"""

from __future__ import annotations

from mjxrunner.kit.observations import ObsConfig
from mjxrunner.kit.pixels import PixelSpec
from mjxrunner.tasks import cartpole
from mjxrunner.tasks.base import no_state

FRAMES = 3
"""Frames stacked per observation."""

PIXELS = PixelSpec("side", width=64, height=64)
"""One 64 x 64 RGB camera, the scene's ``"side"`` view of the rail."""

STACK = ObsConfig(history={"pixels": FRAMES})

BALANCE_PIXELS = cartpole.BALANCE.replace(
    name="cartpole_balance_pixels", observation=no_state, pixels=PIXELS, obs_config=STACK
)

SWINGUP_PIXELS = cartpole.SWINGUP.replace(
    name="cartpole_swingup_pixels", observation=no_state, pixels=PIXELS, obs_config=STACK
)

TASKS = (BALANCE_PIXELS, SWINGUP_PIXELS)
