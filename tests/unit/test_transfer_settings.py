"""The transfer settings without a network: a body split into P parts and put back in order, byte for
byte; the part headers; the server's rendezvous of the parts; the experiment's dimensions and the
plan's trials."""

from __future__ import annotations

import textwrap
import threading

import numpy as np
import pytest

from contracts.errors import UserError
from contracts.transfer import bounds, join, parse_part, part_header, pieces, split
from server.handler import Reply
from server.parts import Rendezvous
from testbed.experiment import load_experiment, planned_trials
from testbed.sweep.plan import plan_trials


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 1 << 16, (1 << 16) + 3])
@pytest.mark.parametrize("parts", [1, 2, 3, 4, 32])
def test_split_then_join_is_the_body_byte_for_byte(n, parts):
    body = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    slices = split(body, parts)
    assert len(slices) == parts
    assert join(slices) == body
    sizes = [s.nbytes for s in slices]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == n
    assert bounds(n, parts)[0][0] == 0 and bounds(n, parts)[-1][1] == n


def test_join_refuses_a_missing_part_and_pieces_are_the_io_size():
    with pytest.raises(ValueError, match="part\\(s\\) 2 of 3 missing"):
        join([b"a", None, b"c"])
    body = bytes(range(256)) * 5
    writes = list(pieces(body, 300))
    assert [w.nbytes for w in writes] == [300, 300, 300, 300, 80] and b"".join(writes) == body


def test_part_headers():
    assert part_header(0, 4) == "1/4"
    assert parse_part(None, None) is None
    assert parse_part("ab-12", " 3 / 4 ") == ("ab-12", 2, 4)
    for transfer, part, words in [
        ("x", None, "needs both"),
        ("bad id!", "1/2", "is not 1-64"),
        ("x", "0/2", "need 1 <= i <= P"),
        ("x", "3/2", "need 1 <= i <= P"),
        ("x", "1/33", "need 1 <= i <= P <= 32"),
        ("x", "one", "is not i/P"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_part(transfer, part)


def test_the_last_part_in_runs_the_request_and_each_part_answers_its_share():
    meeting = Rendezvous(max_body=1 << 20, timeout=5.0)
    body = bytes(range(200))
    answers = [None] * 3

    def part(i: int) -> None:
        transfer, complete = meeting.arrive("t1", i, 3, bytes(split(body, 3)[i]))
        if complete:
            assert meeting.take(transfer) == body
            meeting.publish(transfer, Reply(200, body[::-1], {"X-Codec": "raw"}))
        answers[i] = meeting.answer(transfer, i)

    threads = [threading.Thread(target=part, args=(i,)) for i in (2, 0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert b"".join(a.body for a in answers) == body[::-1]
    assert [a.headers["X-Part"] for a in answers] == ["1/3", "2/3", "3/3"]
    assert meeting.open_transfers() == 0


def test_parts_that_disagree_or_exceed_the_body_limit_are_refused():
    meeting = Rendezvous(max_body=10, timeout=0.2)
    transfer, complete = meeting.arrive("t", 0, 2, b"12345")
    assert not complete
    assert meeting.arrive("t", 0, 2, b"x").status == 400  # twice
    assert meeting.arrive("t", 1, 3, b"x").status == 400  # another P
    transfer, complete = meeting.arrive("t", 1, 2, b"123456")  # 11 bytes in all
    assert not complete and meeting.answer(transfer, 1).status == 413
    lonely, _ = meeting.arrive("u", 0, 2, b"1")
    assert meeting.answer(lonely, 0).status == 408  # the other part never came


EXP = """\
    ops: [mul]
    sizes: [400]
    rates: [20]
    methods: [raw]
    reps: 2
"""


def test_the_settings_are_dimensions_of_the_plan(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(textwrap.dedent(EXP + "    parallelism: [1, 2, 4]\n    io_kb: [16, 256]\n"))
    exp = load_experiment(path)
    assert (exp.parallelism, exp.io_kb) == ((1, 2, 4), (16, 256))
    trials = plan_trials(exp)
    assert len(trials) == planned_trials(exp) == 2 + 3 * 2 * 2
    remote = [t for t in trials if t.method == "raw"]
    assert {(t.parallelism, t.io_kb) for t in remote} == {(p, io) for p in (1, 2, 4) for io in (16, 256)}
    assert len({t.cell for t in remote}) == 6
    for bad, words in [("parallelism: [0]", "positive"), ("parallelism: [64]", "at most 32"),
                       ("parallelism: [2, 2]", "repeats"), ("io_kb: [1, 1]", "repeats")]:  # fmt: skip
        path.write_text(textwrap.dedent(EXP) + bad + "\n")
        with pytest.raises(UserError, match=words):
            load_experiment(path)
    path.write_text(textwrap.dedent(EXP.replace("[raw]", "[raw, grpc]")) + "parallelism: [2]\n")
    with pytest.raises(UserError, match="HTTP methods"):
        load_experiment(path)
