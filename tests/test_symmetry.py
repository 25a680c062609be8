"""Mirror images (``mjxrunner.kit.symmetry``): signed permutations of observation
terms and actions, and the observation normalizer's symmetric statistics."""

import jax.numpy as jnp
import numpy as np
import pytest

from mjxrunner.kit.symmetry import Flip, Mirror


def test_a_flip_permutes_and_signs_each_block_of_a_history():
    flip = Flip(perm=(1, 0, 2), sign=(1.0, 1.0, -1.0))
    x = jnp.arange(1.0, 7.0)  # two blocks of three: a history of 2
    np.testing.assert_array_equal(flip(x), [2, 1, -3, 5, 4, -6])
    np.testing.assert_array_equal(flip(flip(x)), x)
    np.testing.assert_array_equal(x.reshape(2, 3) @ flip.matrix(), flip(x).reshape(2, 3))
    np.testing.assert_array_equal(Flip.keep(3)(x), x)
    with pytest.raises(ValueError, match="cannot act on a last axis of 4"):
        flip(jnp.zeros(4))


@pytest.mark.parametrize(
    ("perm", "sign", "message"),
    [
        ((0, 0), (1, 1), "permutation"),
        ((0, 1), (1,), "permutation"),
        ((0, 1), (1, 2), "must be \\+1 or -1"),
        ((1, 2, 0), (1, 1, 1), "mirrored twice"),  # a 3-cycle is no mirror
        ((1, 0), (1, -1), "mirrored twice"),  # swapped with one sign: twice is -1
    ],
)
def test_a_flip_that_is_no_mirror_is_refused(perm, sign, message):
    with pytest.raises(ValueError, match=message):
        Flip(perm, sign)


def test_a_mirror_refuses_an_observation_of_other_terms():
    mirror = Mirror(terms={"a": Flip.signs(1, -1), "b": Flip.keep(1)}, action=Flip.keep(1))
    assert [k for k, _ in mirror.terms] == ["a", "b"]  # stored sorted, hashable
    hash(mirror)
    image = mirror.observation({"a": jnp.array([[1.0, 2.0]]), "b": jnp.array([[3.0]])})
    np.testing.assert_array_equal(image["a"], [[1.0, -2.0]])
    with pytest.raises(ValueError, match=r"knows the terms \['a', 'b'\]"):
        mirror.observation({"a": jnp.zeros(2)})
    with pytest.raises(TypeError, match="a Flip per observation term"):
        Mirror(terms={"a": (0, 1)}, action=Flip.keep(1))
    # equal mirrors are equal and hash alike: a task holding one stays a static key
    again = Mirror(terms={"b": Flip.keep(1), "a": Flip.signs(1, -1)}, action=Flip.keep(1))
    assert again == mirror and hash(again) == hash(mirror)
