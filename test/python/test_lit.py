"""Run the lit + FileCheck suites (test/<area>/*.mlir); a lit failure fails pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TEST_DIR = Path(__file__).resolve().parent.parent


def test_lit_suite() -> None:
    bindir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    res = subprocess.run(
        [os.path.join(bindir, "lit"), "-q", "-j", "2", str(TEST_DIR)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-20000:] + res.stderr[-5000:]
    # guard against a suite that silently ran nothing
    listed = subprocess.run(
        [os.path.join(bindir, "lit"), "--show-tests", str(TEST_DIR)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.stdout.count(".mlir") >= 5, listed.stdout
