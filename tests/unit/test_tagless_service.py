"""The tagless server's service without a socket: each call's reply frame, refusals and the budget."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from contracts.tagless import TIMING, Frame, Status, Timing, error_message, study
from server import rpc_study_ops
from server.rpc_study_ops import MAX_NAME
from server.tagless_service import Budget, Held, Service


@pytest.fixture
def service():
    return Service(max_body=1 << 16)


def call(service: Service, name: str, values: tuple, flags: int = 0) -> Frame:
    method = study().method(name)
    return service.call(Frame(41, method.id, method.request.encode(values), flags))


def test_a_call_is_answered_with_its_id_and_the_reply_message(service):
    reply = call(service, "Average", (np.array([1, 2], dtype=np.int32),))
    assert (reply.call_id, reply.method_id, reply.status, reply.trailer) == (41, 2, Status.OK, b"")
    assert study().messages["Mean"].decode(reply.payload) == (1.5,)


def test_timing_asked_is_the_trailer_of_six_figures(service):
    reply = call(service, "SayHello", ("t",), flags=TIMING)
    timing = Timing.unpack(reply.trailer)
    assert all(v >= 0 for v in vars(timing).values())


def test_an_unknown_method_and_a_bad_payload_are_refused_by_status(service):
    unknown = service.call(Frame(1, 999, b""))
    assert unknown.status == Status.UNKNOWN_METHOD and error_message(unknown) == "no method 999"
    bad = service.call(Frame(2, 1, b"\x01"))
    assert bad.status == Status.BAD_FRAME and "count" in error_message(bad)


def test_a_reply_past_the_limit_is_refused_before_it_is_drawn(service):
    assert call(service, "GetRandNums", ((1 << 14) - 1,)).status == Status.OK  # 4 + 4n = 64 KiB: the limit
    refused = call(service, "GetRandNums", (1 << 14,))
    assert refused.status == Status.TOO_LARGE
    name = "x" * (MAX_NAME + 1)
    big = Service(max_body=4 * MAX_NAME)
    assert call(big, "SayHello", (name,)).status == Status.TOO_LARGE
    assert call(big, "SayHello", (name[1:],)).status == Status.OK


def test_a_bug_is_answered_internal_and_the_service_goes_on(service, monkeypatch):
    def broken(method, values, max_reply):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("server.tagless_service.answer", broken)
    reply = call(service, "SayHello", ("x",))
    assert reply.status == Status.INTERNAL and "ZeroDivisionError" in error_message(reply)
    monkeypatch.setattr("server.tagless_service.answer", rpc_study_ops.answer)
    assert call(service, "SayHello", ("x",)).status == Status.OK


def test_the_operations():
    assert rpc_study_ops.say_hello(("a",)) == ("Hello a",)
    assert rpc_study_ops.average((np.array([], dtype=np.int32),)) == (0.0,)
    assert rpc_study_ops.average((np.array([-(1 << 31), (1 << 31) - 1], dtype=np.int32),)) == (-0.5,)
    (drawn,) = rpc_study_ops.get_rand_nums((1000,), 1 << 20)
    assert drawn.dtype == np.int32 and drawn.min() >= 0
    assert rpc_study_ops.echo((1, 2)) == (1, 2)


def test_a_reply_is_held_in_the_budget_and_a_full_budget_answers_busy():
    service = Service(max_body=1 << 16)
    held = Held(Budget(1 << 16, wait_s=0.05))
    assert service.call(Frame(1, 3, study().messages["Count"].encode((100,))), held).status == Status.OK
    assert held.n == 4 + 400 and held.budget.held == 404  # the reply's bytes, until it is sent
    held.budget.take((1 << 16) - 404)  # another call's
    busy = service.call(Frame(2, 3, study().messages["Count"].encode((1,))), held)
    assert busy.status == Status.BUSY and "try again" in error_message(busy)
    held.give_all()
    assert held.budget.held == (1 << 16) - 404
    alone = Held(Budget(1 << 16, wait_s=0.05))  # a call alone never waits for its own bytes
    full = Frame(3, 3, study().messages["Count"].encode(((1 << 14) - 1,)))  # a reply of the whole limit
    alone.take(len(full.payload))
    assert service.call(full, alone).status == Status.OK and alone.n == 4 + (1 << 16)


def test_the_budget_holds_a_reader_until_there_is_room():
    budget = Budget(10)
    budget.take(8)
    waited = threading.Event()

    def reader():
        budget.take(5)
        waited.set()

    t = threading.Thread(target=reader)
    t.start()
    assert not waited.wait(0.1)
    budget.give(8)
    assert waited.wait(5)
    t.join()
    assert budget.held == 5
