"""``surge demo``'s table says what it measured: answered + lost = answerable on
every row, a pattern that gave up on hosts is marked, a sampled row says so."""

from __future__ import annotations

from surge.bench.demo import Row, render


def _row(peer: str, wall: float, ok: int, lost: int, answerable: int, **kw: object) -> Row:
    fields: dict[str, object] = {
        "label": peer,
        "in_flight": 100,
        "cpu_s": 1.0,
        "extrapolated": False,
        "note": "",
    }
    fields.update(kw)
    return Row(peer, wall_s=wall, ok=ok, lost=lost, answerable=answerable, **fields)  # type: ignore[arg-type]


def test_the_table_is_consistent_and_flags_what_it_should() -> None:
    rows = [
        _row("requests_seq", 600.0, 29, 0, 28, extrapolated=True),
        _row("aiohttp_gather", 3.1, 938, 12, 930),  # ok counts borderline hosts too
        _row("surge", 3.0, 940, 0, 930),
    ]
    table = render(rows, 2.9, sample_of=1000)
    lines = table.splitlines()
    assert "I/O patterns for 1,000 GETs" in lines[0]
    aiohttp = next(line for line in lines if line.startswith("aiohttp_gather"))
    assert "918/930" in aiohttp and "1.0x*" in aiohttp  # never "answered 938 of 930"
    surge = next(line for line in lines if line.startswith("surge"))
    assert "930/930" in surge and "1.0x " in surge + " "
    sequential = next(line for line in lines if line.startswith("requests_seq"))
    assert "[sample]" in sequential and "~" in sequential
    assert any(line.startswith("* lost hosts") for line in lines)
    assert any(line.startswith("~ [sample]") for line in lines)
