"""Sessions made before fork() (a server's workers forked from a preloaded model) give right
answers in every process: they gave wrong ones when the processes shared the device pool's
arenas."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import provider
    sys.path.insert(0, sys.argv[1])
    from ort_models import CNN
    P = ["NPUExecutionProvider", "CPUExecutionProvider"]
    sess = provider.InferenceSession(CNN, providers=P)
    xs = [np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32)
          for i in range(4)]
    ys = [sess.run(None, {"x": x})[0] for x in xs]
    binding = sess.io_binding()
    binding.bind_cpu_input("x", xs[0])
    binding.bind_npu_output("y")
    sess.run_with_iobinding(binding)
    bound = binding.get_outputs()[0]

    def wrong_runs(first: int) -> int:
        return sum(not np.allclose(sess.run(None, {"x": xs[(i + first) % 4]})[0],
                                   ys[(i + first) % 4], atol=1e-5) for i in range(300))

    children = []
    for c in range(2):
        pid = os.fork()
        if pid == 0:
            bad = wrong_runs(c + 1) + (not np.allclose(bound.numpy(), ys[0], atol=1e-5))
            fresh = provider.InferenceSession(CNN, providers=P)
            bad += not np.allclose(fresh.run(None, {"x": xs[1]})[0], ys[1], atol=1e-5)
            os._exit(min(bad, 100))
        children.append(pid)
    bad = wrong_runs(0)
    print("parent", bad, "children", [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1])
                                      for p in children])
""")


def test_sessions_made_before_fork_are_right_in_every_process(tmp_path):
    """(cwd elsewhere: `python -c` would import the source tree, not the installed package)"""
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", SCRIPT,
                           str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["parent", "0", "children", "[0,", "0]"], proc.stdout
