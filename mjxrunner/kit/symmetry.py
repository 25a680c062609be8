"""Left-right symmetry: a task's mirror image, for policies that are symmetric by
construction.

A symmetric robot (a quadruped, a humanoid) walking to the left is the mirror image
of one walking to the right. A task that says how its observation terms and its
action look in the mirror (:class:`Mirror`, ``Task.mirror``) lets a trainer make
its policy symmetric exactly: the average of the network's answer and the mirror
image of its answer to the mirrored observation (``mjxrunner train --symmetric``).
Each term's mirror is a signed permutation of its last axis (:class:`Flip`); a term
with a history (``(k * d,)``) is mirrored block by block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Flip:
    """A signed permutation of a vector: entry ``i`` of the image is ``sign[i] *
    x[perm[i]]``. Mirrored twice, a vector is itself again.

    Attributes:
      perm: ``(d,)`` the entry each entry of the image reads.
      sign: ``(d,)`` +1 or -1 each.
    """

    perm: tuple[int, ...]
    sign: tuple[float, ...]

    def __post_init__(self) -> None:
        perm = tuple(int(i) for i in self.perm)
        sign = tuple(float(x) for x in self.sign)
        if sorted(perm) != list(range(len(perm))) or len(sign) != len(perm):
            raise ValueError(
                f"Flip needs a permutation of 0..d-1 and d signs, got perm {perm}, sign {sign}"
            )
        if any(x not in (1.0, -1.0) for x in sign):
            raise ValueError(f"Flip's signs must be +1 or -1, got {sign}")
        p, s = np.array(perm), np.array(sign)
        if not (np.array_equal(p[p], np.arange(len(p))) and np.all(s * s[p] == 1)):
            raise ValueError(
                f"a mirror mirrored twice must be the identity: perm {perm}, sign {sign}"
            )
        object.__setattr__(self, "perm", perm)
        object.__setattr__(self, "sign", sign)

    @staticmethod
    def keep(d: int) -> Flip:
        """The identity on ``d`` entries: a term the mirror leaves as it is."""
        return Flip(tuple(range(d)), (1.0,) * d)

    @staticmethod
    def signs(*sign: float) -> Flip:
        """Entries that keep their place, some changing sign (a vector of the robot's
        frame: ``signs(1, -1, 1)`` for a velocity, ``signs(-1, 1, -1)`` for a rate)."""
        return Flip(tuple(range(len(sign))), sign)

    def matrix(self) -> np.ndarray:
        """``(d, d)`` the signed permutation matrix ``P`` with ``x @ P`` the image of
        ``x`` (a product, where a graph format has no gather)."""
        d = len(self.perm)
        p = np.zeros((d, d), np.float32)
        p[list(self.perm), np.arange(d)] = self.sign
        return p

    def __call__(self, x: jax.Array) -> jax.Array:
        """``x`` ``(..., k * d)`` mirrored, each of its ``k`` blocks of ``d``."""
        d = len(self.perm)
        if x.shape[-1] % d:
            raise ValueError(f"a mirror of {d} entries cannot act on a last axis of {x.shape[-1]}")
        blocks = x.reshape(*x.shape[:-1], x.shape[-1] // d, d)
        image = blocks[..., jnp.asarray(self.perm)] * jnp.asarray(self.sign, x.dtype)
        return image.reshape(x.shape)


@dataclasses.dataclass(frozen=True)
class Mirror:
    """A task's mirror image: of each observation term and of the action.

    Attributes:
      terms: ``(name, Flip)`` pairs, one per observation term (a dict observation),
        or ``(("", Flip),)`` for an observation that is one vector.
      action: the action's mirror.
    """

    terms: tuple[tuple[str, Flip], ...]
    action: Flip

    def __post_init__(self) -> None:
        terms = self.terms.items() if isinstance(self.terms, Mapping) else self.terms
        terms = tuple(sorted((str(k), f) for k, f in terms))
        if not all(isinstance(f, Flip) for _, f in terms) or not isinstance(self.action, Flip):
            raise TypeError("Mirror takes a Flip per observation term and one for the action")
        object.__setattr__(self, "terms", terms)

    def observation(self, obs: Any) -> Any:
        """``obs`` (a dict of terms or one array, any leading axes) mirrored.

        Raises:
          ValueError: a term the mirror does not know, or one it knows is missing.
        """
        flips = dict(self.terms)
        if not isinstance(obs, Mapping):
            return flips[""](obs)
        if set(obs) != set(flips):
            raise ValueError(
                f"the mirror knows the terms {sorted(flips)}, the observation has {sorted(obs)}"
            )
        return {k: flips[k](x) for k, x in obs.items()}
