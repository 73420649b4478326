"""The study's batches: which method an operation and size name, the request values, a batch's figures."""

from __future__ import annotations

import numpy as np
import pytest

from client.__main__ import main as client_main
from client.rpc_calls import request_values, run_batch, study_method
from client.tagless_call import Reply
from contracts.tagless import Timing


def test_an_operation_and_its_size_name_the_method_and_its_values():
    assert study_method("SendRcvLargeData", 256).name == "SendRcvLargeData256"
    assert study_method("Average", 7).name == "Average"
    assert request_values(study_method("SayHello", 7), 7) == ("testbed",)
    assert request_values(study_method("SayHello", 10), 10) == ("testbedtes",)  # n characters
    (numbers,) = request_values(study_method("Average", 1000), 1000)
    assert numbers.dtype == np.int32 and len(numbers) == 1000 and numbers.min() < 0 < numbers.max()
    assert request_values(study_method("GetRandNums", 10), 10) == (10,)
    members = request_values(study_method("SendRcvLargeData", 128), 128)
    assert len(members) == 128 and min(members) >= 0 and max(members) <= (1 << 31) - 1
    assert members == request_values(study_method("SendRcvLargeData", 128), 128)  # seeded: both transports'
    with pytest.raises(ValueError, match="no study operation SendRcvLargeData100"):
        study_method("SendRcvLargeData", 100)


def test_the_cli_refuses_an_unknown_operation_in_one_line(capsys):
    argv = ["rpc-calls", "--transport", "tagless", "--target", "127.0.0.1:1", "--op", "Divide"]
    assert client_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no study operation Divide") and err.count("\n") == 1


class Scripted:
    """A client whose calls take the times given, and say so."""

    def __init__(self) -> None:
        self.calls: list[bool] = []

    def call(self, method, values, timing=False):
        self.calls.append(timing)
        return Reply(("ok",), Timing(0, 1e-6, 0, 2e-6, 0, 3e-6) if timing else None, 20, 30 + 48 * timing)


def test_a_batch_counts_bytes_from_a_call_without_timing_and_times_each_call():
    client = Scripted()
    batch = run_batch(client, study_method("SayHello", 0), ("x",), calls=100, warmup=0)
    assert client.calls == [False] + [True] * 100  # one untimed call first, whatever the warm-up
    assert (batch.calls, batch.bytes_up, batch.bytes_down) == (100, 20, 30)
    assert batch.server_cpu_s == pytest.approx(6e-6)
    assert 0 < batch.median_s <= batch.p99_s <= batch.total_s


def test_a_persistent_connection_whose_batch_failed_is_not_kept_for_the_next():
    """Nothing listens at the target: the batch fails with its error, and the next batch opens its own
    connection rather than calling over the broken one."""
    from client.worker import TrialWorker
    from contracts.stages import PERSISTENT, TAGLESS
    from contracts.worker_api import TrialSpec

    worker = TrialWorker(
        "http://127.0.0.1:1",
        seed=1,
        timeout=1.0,
        connection=PERSISTENT,
        tagless_targets={"python": "127.0.0.1:1"},
    )
    spec = TrialSpec(trial=1, op="SayHello", size=7, dtype="float64", method=TAGLESS, calls=3)
    assert worker.run(spec).error
    assert worker.study_clients == {}
