"""One process of the two-process test in test_sharding.py (run as a script).

Usage: python distributed_worker.py PROCESS_ID PORT OUT.npz [IMPL]
"""

import os
import sys

# One CPU device per process; the suite's other XLA flags (its optimization level) stay.
os.environ["XLA_FLAGS"] = " ".join(
    flag
    for flag in os.environ.get("XLA_FLAGS", "").split()
    if "xla_force_host_platform_device_count" not in flag
)

import jax
import numpy as np

process_id, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
impl = sys.argv[4] if len(sys.argv) > 4 else "jax"
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)

from sharded_script import run  # noqa: E402

from mjxrunner import MultiEnvRunner  # noqa: E402

assert jax.device_count() == 2 and jax.local_device_count() == 1
runner = MultiEnvRunner("cartpole", 4, seed=7, devices="all", impl=impl)
results = run(runner)
if process_id == 0:
    np.savez(out, **{f"r{i}": r for i, r in enumerate(results)})
jax.distributed.shutdown()
