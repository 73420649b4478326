"""`testbed shape` reports what the kernel holds, and refuses when it is not what was asked."""

import pytest

from contracts.agent_answers import HtbRates, ShapingInForce
from contracts.errors import UserError
from testbed.cli.link import held_rates

ASKED = {"up": ("tb-a-s", 20_000_000), "down": ("tb-a-c", 40_000_000)}


def shaping(up: int | None, down: int | None) -> dict[str, ShapingInForce]:
    return {
        "tb-a-s": ShapingInForce(htb=HtbRates(rate=up, ceil=up) if up else None, netem=None),
        "tb-a-c": ShapingInForce(htb=HtbRates(rate=down, ceil=down) if down else None, netem=None),
    }


def test_held_rates_are_the_kernels():
    assert held_rates(shaping(20_000_000, 40_000_000), ASKED) == {"up": 20_000_000, "down": 40_000_000}
    # HTB keeps bytes per second: a rate that is not a multiple of 8 bit/s comes back rounded
    assert held_rates(shaping(20_000_000, 40_000_000), {"up": ("tb-a-s", 20_000_004)}) == {"up": 20_000_000}


@pytest.mark.parametrize(
    ("up", "down", "says"),
    [(34_359_738_360, 40_000_000, "34.3597gbit"), (20_000_000, None, "no HTB class")],
)
def test_a_rate_the_kernel_does_not_hold_is_refused(up, down, says):
    with pytest.raises(UserError) as err:
        held_rates(shaping(up, down), ASKED)
    assert says in str(err.value)
