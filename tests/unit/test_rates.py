import pytest

from contracts.errors import UserError
from contracts.units import default_burst, expected_goodput, format_rate, parse_rate


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("20mbit", 20_000_000),
        ("20Mbit", 20_000_000),
        ("20", 20_000_000),
        (20, 20_000_000),
        ("1.5mbit", 1_500_000),
        ("500kbit", 500_000),
        ("1gbit", 1_000_000_000),
        (" 10 mbit ", 10_000_000),
        ("64000bit", 64_000),
    ],
)
def test_parse_rate_accepts_bit_units(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text", ["0", "fast", "-5mbit", "20mbps", "10 furlongs", "", "1e3", "0kbit", True])
def test_parse_rate_rejects_with_a_user_error(text):
    with pytest.raises(UserError) as info:
        parse_rate(text, "--rate")
    assert "--rate" in str(info.value)


def test_mbps_is_refused_because_tc_reads_it_as_bytes():
    with pytest.raises(UserError, match="bytes per second") as info:
        parse_rate("20mbps")
    assert info.value.fix == "write 20mbit for bits per second"


def test_format_rate_round_trips_common_rates():
    for text in ("10mbit", "1.5mbit", "1gbit", "500kbit"):
        assert format_rate(parse_rate(text)) == text


def test_default_burst_is_one_tick_of_data_plus_one_frame():
    # 20 Mbit/s = 2.5 MB/s; at HZ=250 one tick is 10,000 bytes; plus a 1514-byte frame
    assert default_burst(20_000_000, 1500, hz=250) == 10_000 + 1514
    # never anywhere near a second of data
    assert default_burst(100_000_000, 1500, hz=100) < 100_000_000 // 8 // 10


def test_expected_goodput_uses_tcp_payload_share_of_a_frame():
    assert expected_goodput(20_000_000) == pytest.approx(20e6 * 1448 / 1514)


def test_rates_htb_cannot_hold_are_refused():
    assert parse_rate("34gbit") == 34 * 10**9
    for text in ("35gbit", "1000000gbit"):
        with pytest.raises(UserError, match="the most HTB's 32-bit rate field holds"):
            parse_rate(text)
