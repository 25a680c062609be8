"""The exceptions and warnings of guards (see :mod:`mjxrunner.engine.guards`)."""


class GuardError(RuntimeError):
    """A guard with policy ``"raise"`` tripped (the step was rolled back)."""


class GuardWarning(RuntimeWarning):
    """A guard with policy ``"warn"`` tripped."""


class InstabilityError(GuardError, FloatingPointError):
    """A world's state became non-finite or ran away (policy ``"raise"``)."""


class InstabilityWarning(GuardWarning):
    """A world's state became non-finite or ran away (policy ``"warn"``)."""


class CapacityOverflowError(GuardError):
    """A Warp buffer (contacts, constraint rows, ...) was too small for a step."""


class CapacityWarning(GuardWarning):
    """A Warp buffer overflowed and the policy is ``"warn"``."""
