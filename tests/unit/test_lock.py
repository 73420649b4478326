"""One command at a time per testbed: the second is refused naming the first; a dead holder's lock
is taken over; the lock file goes with its holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from contracts.errors import UserError
from testbed.lock import held


def test_a_second_holder_is_refused_with_the_first_ones_name(tmp_path):
    with held("tbu", "testbed sweep smoke.yaml", tmp_path):
        with pytest.raises(UserError) as exc, held("tbu", "testbed down", tmp_path):
            pass
        assert exc.value.message == f"testbed 'tbu' is in use by pid {os.getpid()} (testbed sweep smoke.yaml)"
        with held("tbv", "another testbed", tmp_path):  # other prefixes are other testbeds
            pass
    assert not (tmp_path / "tbu.lock").exists()
    with held("tbu", "testbed down", tmp_path):  # released: free again
        pass


def test_the_lock_of_a_killed_process_is_taken_over(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from testbed.lock import held
            with held("tbu", "testbed sweep", Path({str(tmp_path)!r})):
                print("holding", flush=True)
                time.sleep(60)
        """)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "holding"
    with (
        pytest.raises(UserError, match=f"in use by pid {holder.pid}"),
        held("tbu", "testbed shape", tmp_path),
    ):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (tmp_path / "tbu.lock").exists()  # left behind by the kill, but no longer locked
    with held("tbu", "testbed down", tmp_path):
        pass
    assert not (tmp_path / "tbu.lock").exists()
