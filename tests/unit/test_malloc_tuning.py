"""The broker's glibc malloc settings (common/malloc_tuning.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

PROBE = "from common.malloc_tuning import tune_malloc; print(tune_malloc())"


def run(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def test_applied_on_glibc_unless_the_operator_set_malloc_variables() -> None:
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")  # the machine the suite runs on is Debian
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    assert run(base) == "True"
    assert run({**base, "MALLOC_TRIM_THRESHOLD_": "1048576"}) == "False"
