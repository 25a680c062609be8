"""XLA:CPU's fusion emitters are off in every process that imports mjxrunner first,
unless the user chose otherwise (mjxrunner/cpu_fusion.py says why)."""

import os

import pytest

from mjxrunner import backend_info
from mjxrunner.engine import cpu_fusion


def test_this_process_runs_with_the_emitters_off():
    assert cpu_fusion.active()
    assert cpu_fusion.FLAG in os.environ["XLA_FLAGS"]
    assert backend_info()["cpu_fusion_emitters"] is False


@pytest.mark.parametrize(
    ("flags", "opt_out", "started", "known", "active", "added"),
    [
        ("", "", False, True, True, True),
        ("--xla_force_host_platform_device_count=2", "", False, True, True, True),
        ("", "1", False, True, False, False),  # opted out
        ("", "", True, True, False, False),  # too late: XLA read its flags already
        ("", "", False, False, False, False),  # a jaxlib whose XLA aborts on the flag
        ("--xla_cpu_use_fusion_emitters=true", "", False, True, False, False),  # the user's
        ("--xla_cpu_use_fusion_emitters=false", "", False, True, True, False),
    ],
)
def test_install_respects_the_users_choice(
    monkeypatch, flags, opt_out, started, known, active, added
):
    monkeypatch.setattr(cpu_fusion, "KNOWN", known)
    monkeypatch.setenv("XLA_FLAGS", flags)
    monkeypatch.setenv(cpu_fusion.OPT_OUT, opt_out)
    monkeypatch.setattr(cpu_fusion.xla_bridge, "backends_are_initialized", lambda: started)
    monkeypatch.setattr(cpu_fusion, "_active", cpu_fusion._active)  # restored afterwards
    assert cpu_fusion.install() is active
    assert cpu_fusion.active() is active
    after = os.environ["XLA_FLAGS"]
    assert after.startswith(flags.strip())
    assert (cpu_fusion.FLAG in after and cpu_fusion.FLAG not in flags) is added
