"""Setting controls from the host: what the runner and the group runner share.

Both shells validate a ``(num_envs, width)`` action array (or rows of chosen worlds)
the same way and hand a ``(num_envs,)`` mask with a full array to their own
``_write_ctrl``, which writes every selected row in one compiled call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mjxrunner.engine import backend, checks


class Controls:
    """``set_actions``/``clear_actions`` over ``num_envs``, ``action_dim()`` and
    ``_write_ctrl(mask, full)`` of the class it is mixed into."""

    num_envs: int

    def action_dim(self) -> int:
        raise NotImplementedError

    def _write_ctrl(self, mask: np.ndarray, full: np.ndarray) -> None:
        raise NotImplementedError

    def set_actions(self, actions: Any, env_ids: Any = None) -> None:
        """Sets the controls of all worlds, or of ``env_ids`` only.

        Args:
          actions: ``(num_envs, action_dim())``, or ``(len(env_ids), action_dim())``
            with ``env_ids``; finite real numbers. MuJoCo clamps them to
            ``ctrlrange`` when limited; a group with fewer actuators takes the
            first ``nu`` columns.
          env_ids: None or unique world indices (global ones for groups).
        """
        dtype = backend.float_dtype()
        width = self.action_dim()
        self._write_ctrl(
            *checks.world_rows(actions, "actions", env_ids, self.num_envs, width, dtype)
        )

    def clear_actions(self, env_ids: Any = None) -> None:
        """Zeroes the controls of all worlds, or of ``env_ids`` only."""
        mask = checks.ids_mask(env_ids, self.num_envs)
        self._write_ctrl(mask, np.zeros((self.num_envs, self.action_dim()), backend.float_dtype()))
