"""What writing a WARC costs per HTTP exchange: surge's WarcWriter against warcio's.

Run it from the repository root::

    python benchmarks/warc.py            # ~30 s
    python benchmarks/warc.py --quick    # a smoke run
    python benchmarks/warc.py --only writers

Issue #21's target: ``surge fetch --warc`` may add at most 20% of the client's CPU
per request at 10 KB bodies with keep-alive.  surge's client costs ~60 us per
request end to end, so a 10 KB exchange may cost the writer ~12 us.

``writers``: the CPU time (process time, the fastest of five runs) of writing one
exchange - a request record and a response record, each its own gzip member, to
a real file - with a 119-byte request head, a 184-byte response head and bodies of
text that deflates like HTML (~0.38 at level 1), or of incompressible bytes sent
with ``Content-Encoding: gzip``.  warcio writes the same exchanges through
``WARCWriter.create_warc_record`` + ``write_request_response_pair``, the way its
``capture_http`` does (gzip level 9, a new compressor per record, its own
digests).  Both outputs are checked with ``warcio check`` before they count.
surge's rows use its default deflate (ISA-L when python-isal, the ``warc``
extra, is installed) unless they say zlib.

``parts``: the pieces of that cost for a 10 KB body: SHA-1 (two passes per body:
the block digest starts with the head), base32, CRC-32, deflate at levels 1 and 6
in the writer's long-lived stream, a new ``zlib.compressobj`` per record (what
warcio and gzip.compress pay), one write system call, and the faster deflates
and CRC-32s on PyPI, each measured when installed: ISA-L (python-isal, levels 0
and 1) and zlib-ng (``zlib-ng``), with the share each leaves of the text.

Results go to ``benchmarks/results/warc.json``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib
import io
import random
import sys
import tempfile
import time
import timeit
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    Table,
    Target,
    announce,
    gc_paused,
    machine_info,
    parse_sections,
    payload,
    print_targets,
    write_json,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "warc.json"
SECTIONS = ["writers", "parts"]
#: The client's CPU per keep-alive request (benchmarks/fetch_clients.py) and the
#: share of it issue #21 allows the WARC writer.
CLIENT_US = 60.0
ALLOWED_SHARE = 0.20

URL = "https://www.example.com/articles/2026/11/page.html"
IP = "93.184.216.34"
REQUEST_HEAD = (
    b"GET /articles/2026/11/page.html HTTP/1.1\r\nHost: www.example.com\r\n"
    b"User-Agent: surge/0.1.0\r\nAccept-Encoding: gzip, br\r\n\r\n"
)


def response_head(length: int, encoded: bool) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nDate: Thu, 26 Nov 2026 09:00:00 GMT\r\nServer: nginx\r\n"
        b"Content-Type: text/html; charset=utf-8\r\n"
        + (b"Content-Encoding: gzip\r\n" if encoded else b"")
        + b"Content-Length: %d\r\nCache-Control: max-age=0\r\nConnection: keep-alive\r\n\r\n"
        % length
    )


def text_body(size: int) -> bytes:
    """Markup from a 400-word vocabulary: deflates to ~0.38 at level 1, like HTML."""
    rng = random.Random(size)
    words = [
        bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(400)
    ]
    parts, length = [], 0
    while length < size:
        line = b'<p class="x">' + b" ".join(rng.choice(words) for _ in range(12)) + b"</p>\n"
        parts.append(line)
        length += len(line)
    return b"".join(parts)[:size]


def encoded_body(size: int) -> bytes:
    return random.Random(-size).randbytes(size)


# -- writers -------------------------------------------------------------------------


def surge_writer(path: Path, **options: Any) -> tuple[Callable[..., Any], Callable[[], None]]:
    from surge.bulk.warc import WarcWriter

    writer = WarcWriter(path, info={"command-line": " ".join(sys.argv)}, **options)

    def write(head: bytes, body: bytes) -> None:
        writer.write_exchange(URL, IP, REQUEST_HEAD, b"", head, body)

    return write, writer.close


def warcio_writer(path: Path) -> tuple[Callable[..., Any], Callable[[], None]]:
    from warcio.warcwriter import WARCWriter

    out = open(path, "wb")  # noqa: SIM115 - closed by the returned close
    writer = WARCWriter(out, gzip=True, warc_version="1.1")
    writer.write_record(
        writer.create_warcinfo_record(path.name, {"software": "warcio", "format": "WARC 1.1"})
    )
    extra = {"WARC-IP-Address": IP}

    def write(head: bytes, body: bytes) -> None:
        response = writer.create_warc_record(
            URL,
            "response",
            payload=io.BytesIO(head + body),
            length=len(head) + len(body),
            warc_headers_dict=extra,
        )
        request = writer.create_warc_record(
            URL,
            "request",
            payload=io.BytesIO(REQUEST_HEAD),
            length=len(REQUEST_HEAD),
            warc_headers_dict=extra,
        )
        writer.write_request_response_pair(request, response)

    return write, out.close


def warcio_check(path: Path) -> bool:
    from warcio.cli import main

    saved = sys.stdout
    sys.stdout = io.StringIO()
    try:
        main(["check", str(path)])
    except SystemExit as exit_:
        return exit_.code == 0
    finally:
        sys.stdout = saved
    return True


def measure_writer(
    make: Callable[[Path], tuple[Callable[..., Any], Callable[[], None]]],
    head: bytes,
    body: bytes,
    count: int,
    folder: Path,
    repeat: int = 5,
) -> dict[str, Any]:
    """CPU microseconds per exchange (fastest run), bytes per exchange, and the check."""
    best = float("inf")
    size = 0
    checked = False
    for run in range(repeat):
        path = folder / f"run{run}.warc.gz"
        write, close = make(path)
        write(head, body)  # warm: the first exchange pays imports and the warcinfo
        with gc_paused():
            start = time.process_time()
            for _ in range(count):
                write(head, body)
            close()
            best = min(best, time.process_time() - start)
        size = path.stat().st_size
        if run == 0:
            checked = warcio_check(path)
        path.unlink()
    return {
        "us_per_exchange": best / count * 1e6,
        "bytes_per_exchange": size / (count + 1),
        "warcio_check": checked,
        "count": count,
    }


def run_writers(quick: bool, folder: Path) -> tuple[dict[str, Any], Table]:
    def count(body_size: int) -> int:
        n = max(50, min(2000, 20_000_000 // max(body_size, 1)))  # ~20 MB of bodies
        return n // 10 if quick else n

    from surge.bulk.warc import DEFLATE_ENGINES

    default = DEFLATE_ENGINES[0]
    zlib_ = {"deflate": "zlib"}
    rows: list[tuple[str, str, Any, int, bool]] = [
        # (name, writer, options, body size, encoded)
        (f"surge, level 1 (default: {default})", "surge", {}, 10_240, False),
        ("surge, level 1, zlib", "surge", zlib_, 10_240, False),
        (f"surge, level 6, {default}", "surge", {"level": 6}, 10_240, False),
        ("surge, level 6, zlib", "surge", {"level": 6, **zlib_}, 10_240, False),
        ("surge, level 0 (stored)", "surge", {"level": 0}, 10_240, False),
        ("surge, level 1, a write per exchange", "surge", {"buffer_size": 0}, 10_240, False),
        ("surge, Content-Encoding: gzip body", "surge", {}, 10_240, True),
        ("surge, empty body", "surge", {}, 0, False),
        ("surge, 1 KB", "surge", {}, 1_024, False),
        ("surge, 100 KB", "surge", {}, 102_400, False),
        ("surge, 100 KB, zlib", "surge", zlib_, 102_400, False),
        ("surge, level 0, 100 KB", "surge", {"level": 0}, 102_400, False),
        ("warcio WARCWriter", "warcio", {}, 10_240, False),
        ("warcio, Content-Encoding: gzip body", "warcio", {}, 10_240, True),
        ("warcio, empty body", "warcio", {}, 0, False),
        ("warcio, 100 KB", "warcio", {}, 102_400, False),
    ]
    results: dict[str, Any] = {}
    for name, which, options, size, encoded in rows:
        body = encoded_body(size) if encoded else text_body(size)
        head = response_head(size, encoded)

        def make(path: Path, which: str = which, options: Any = options) -> Any:
            return surge_writer(path, **options) if which == "surge" else warcio_writer(path)

        result = measure_writer(make, head, body, count(size), folder)
        result.update(writer=which, options=options, body_bytes=size, encoded=encoded)
        results[name] = result
    reference = results["warcio WARCWriter"]["us_per_exchange"]
    table = Table(
        "one exchange (request + response records): CPU, and bytes written",
        ["writer, 10 KB body unless said", "CPU us", "vs warcio", "of 60 us", "bytes", "check"],
    )
    for name, r in results.items():
        table.add(
            name,
            f"{r['us_per_exchange']:.1f}",
            f"{r['us_per_exchange'] / reference:.2f}x" if r["body_bytes"] == 10_240 else "",
            f"{r['us_per_exchange'] / CLIENT_US:.0%}",
            f"{r['bytes_per_exchange']:,.0f}",
            "ok" if r["warcio_check"] else "FAILED",
        )
    slope = {}
    for label, small, large in [
        (f"surge level 1, {default}", f"surge, level 1 (default: {default})", "surge, 100 KB"),
        ("surge level 1, zlib", "surge, level 1, zlib", "surge, 100 KB, zlib"),
        ("surge level 0", "surge, level 0 (stored)", "surge, level 0, 100 KB"),
        ("warcio", "warcio WARCWriter", "warcio, 100 KB"),
    ]:
        per_kb = (
            results[large]["us_per_exchange"] - results[small]["us_per_exchange"]
        ) / 90.0  # 100 KB - 10 KB
        slope[label] = per_kb
        table.note(f"{label}: {per_kb:.2f} us per extra KB of body (10 KB -> 100 KB)")
    results["us_per_kb"] = slope
    return results, table


# -- parts ---------------------------------------------------------------------------


def best_us(fn: Callable[[], object], number: int) -> float:
    with gc_paused():
        runs = timeit.repeat(fn, number=number, repeat=5, timer=time.process_time)
    return min(runs) / number * 1e6


def run_parts(quick: bool, folder: Path) -> tuple[dict[str, Any], Table]:
    from surge.bulk import warc

    number = 200 if quick else 2000
    text, noise = text_body(10_240), encoded_body(10_240)
    results: dict[str, float | None] = {}

    def member(deflater: Any, data: bytes) -> bytes:
        return (
            deflater.compress(data) + deflater.flush(zlib.Z_FULL_FLUSH) + b"\x03\x00"
        )  # + the gzip header and trailer, which cost nothing

    results["sha1, 10 KB"] = best_us(lambda: hashlib.sha1(text).digest(), number)
    digest = hashlib.sha1(text).digest()
    import base64

    results["base64.b32encode, one digest"] = best_us(lambda: base64.b32encode(digest), number)
    results["surge base32, four digests"] = best_us(lambda: warc._base32_80(digest * 4), number)
    results["zlib crc32, 10 KB"] = best_us(lambda: zlib.crc32(text), number)
    for level in (1, 6):
        for name, data in (("text", text), ("incompressible", noise)):
            stream = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
            results[f"zlib level {level}, 10 KB {name}, long-lived stream"] = best_us(
                lambda s=stream, d=data: member(s, d), number
            )
    results["zlib.compressobj() per record (no data)"] = best_us(
        lambda: zlib.compressobj(1, zlib.DEFLATED, 31).flush(), number
    )
    results["gzip.compress level 9, 10 KB text (warcio's way)"] = best_us(
        lambda: gzip.compress(text, 9), number
    )
    path = folder / "write.bin"
    with open(path, "wb", buffering=0) as raw:
        block = noise[:5000]
        results["one write() of 5 KB"] = best_us(lambda: raw.write(block), number)
    path.unlink()
    # the faster deflates on PyPI: python-isal (ISA-L; surge's warc extra) and zlib-ng
    ratios: dict[str, float] = {}
    for label, module_name in (("ISA-L", "isal.isal_zlib"), ("zlib-ng", "zlib_ng.zlib_ng")):
        try:
            module: Any = importlib.import_module(module_name)
        except ImportError:
            results[f"{label} level 1, 10 KB text, long-lived stream"] = None
            continue
        for level in (0, 1) if label == "ISA-L" else (1,):
            for name, data in (("text", text), ("incompressible", noise)):
                stream = module.compressobj(level, module.DEFLATED, -module.MAX_WBITS)
                results[f"{label} level {level}, 10 KB {name}, long-lived stream"] = best_us(
                    lambda s=stream, d=data, m=module: s.compress(d) + s.flush(m.Z_FULL_FLUSH),
                    number,
                )
                if name == "text":
                    stream = module.compressobj(level, module.DEFLATED, -module.MAX_WBITS)
                    out = stream.compress(text) + stream.flush(module.Z_FULL_FLUSH)
                    ratios[f"{label} level {level}"] = len(out) / len(text)
        results[f"{label} crc32, 10 KB"] = best_us(lambda m=module: m.crc32(text), number)
    table = Table("the parts, per 10 KB body", ["part", "CPU us"])
    for name, value in results.items():
        table.add(name, "not installed" if value is None else f"{value:.2f}")
    text_ratio = len(member(zlib.compressobj(1, 8, -15), text)) / len(text)
    table.note(f"the text body deflates to {text_ratio:.3f} at zlib level 1")
    for name, ratio in ratios.items():
        table.note(f"the text body deflates to {ratio:.3f} at {name}")
    sha1_gbps = 10_240 / results["sha1, 10 KB"] / 1e3  # bytes per us = MB/s
    table.note(f"SHA-1 (OpenSSL): {sha1_gbps:.2f} GB/s; two passes per body are the floor")
    return {"us": results, "text_ratio_level_1": text_ratio, "ratios": ratios}, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (few exchanges)")
    parser.add_argument("--only", help=f"comma-separated sections of {SECTIONS}")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results path")
    args = parser.parse_args()
    sections = parse_sections(parser, args.only, SECTIONS)
    started = time.perf_counter()
    info = machine_info(["warcio", "fastwarc", "isal", "zlib-ng"])
    announce("WARC writing", info, args.quick)
    results: dict[str, Any] = {}
    targets = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "writers" in sections:
            results["writers"], table = run_writers(args.quick, folder)
            table.print()
            default_row = next(n for n in results["writers"] if n.startswith("surge, level 1 (d"))
            surge_us = results["writers"][default_row]["us_per_exchange"]
            stored_us = results["writers"]["surge, Content-Encoding: gzip body"]["us_per_exchange"]
            budget = CLIENT_US * ALLOWED_SHARE
            targets.append(
                Target(
                    f"writer CPU per 10 KB exchange ({default_row}, text body)",
                    f"<= {budget:.0f} us ({ALLOWED_SHARE:.0%} of a {CLIENT_US:.0f} us request)",
                    f"{surge_us:.1f} us ({surge_us / CLIENT_US:.0%})",
                    surge_us <= budget,
                )
            )
            targets.append(
                Target(
                    "writer CPU per 10 KB exchange (body already gzip-encoded)",
                    f"<= {budget:.0f} us",
                    f"{stored_us:.1f} us ({stored_us / CLIENT_US:.0%})",
                    stored_us <= budget,
                )
            )
        if "parts" in sections:
            results["parts"], table = run_parts(args.quick, folder)
            table.print()
    print_targets(targets, args.quick)
    settings = {"quick": args.quick, "sections": sections, "client_us": CLIENT_US}
    out = write_json(args.out, payload("warc", info, settings, results, targets, started))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
