"""What ``surge fetch`` carries besides a status (#21): requests with bodies,
the response headers, where it connected and over what TLS, bodies saved to
files and to a WARC, and a pace per host.  Against a real httpbin (which echoes
what it was sent) and the simulated web (TLS), with curl as the reference for
bytes and warcio reading the WARC back."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RESOLVE, require
from tests.http.conftest import httpbin  # noqa: F401 - a fixture, used by name

import surge.errors as surge_errors
from surge import fetch_all as surge_fetch_all
from surge.bulk.bodies import BodyFiles as FilesFor
from surge.bulk.pacing import HostPacer
from surge.bulk.warc import rotated_paths
from surge.sim import SimInfo


def surge_fetch(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "surge.cli", "fetch", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def records(path: Path) -> dict[int, dict[str, Any]]:
    return {r["line"]: r for r in map(json.loads, path.read_text().splitlines())}


def curl(url: str) -> bytes:
    if shutil.which("curl") is None:
        pytest.fail("curl is needed as the reference client")
    return subprocess.run(["curl", "-sS", url], capture_output=True, timeout=30, check=True).stdout


def test_requests_with_bodies_from_flags_and_jsonl_lines(httpbin: str, tmp_path: Path) -> None:  # noqa: F811
    """-X/-d for every input, and a JSONL line's own method, headers and body:
    httpbin echoes each request, and --output-dir keeps the echoes."""
    lines = [
        {"url": f"{httpbin}/anything/1"},
        {"url": f"{httpbin}/anything/2", "method": "PUT", "headers": {"X-Line": "2"}},
        {"url": f"{httpbin}/anything/3", "body": "from the line"},
        {"url": f"{httpbin}/anything/4", "body_base64": base64.b64encode(b"\x00\xff").decode()},
        {"url": f"{httpbin}/anything/5", "headers": [["X-A", "1"], ["X-B", "2"]], "note": "mine"},
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    body = tmp_path / "body.txt"
    body.write_text("a=1\nb=2\n")
    out, folder = tmp_path / "out.jsonl", tmp_path / "bodies"
    done = surge_fetch(
        str(source),
        "-o",
        str(out),
        "-d",
        f"@{body}",
        "-A",
        "crawler/9",
        "--output-dir",
        str(folder),
    )
    assert done.returncode == 0, done.stderr
    got = records(out)
    echo = {n: json.loads(Path(got[n]["body_path"]).read_text()) for n in got}
    # curl's -d @file: the lines joined, sent as a form
    assert echo[1]["method"] == "POST" and echo[1]["form"] == {"a": "1b=2"}
    assert echo[1]["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    assert echo[1]["headers"]["User-Agent"] == "crawler/9"
    assert echo[2]["method"] == "PUT" and echo[2]["headers"]["X-Line"] == "2"
    assert echo[2]["form"] == {"a": "1b=2"}  # the run's body, the line's method
    assert echo[3]["method"] == "POST" and echo[3]["data"] == "from the line"
    assert echo[4]["data"] == "data:application/octet-stream;base64,AP8="
    assert echo[5]["headers"]["X-A"] == "1" and echo[5]["headers"]["X-B"] == "2"


def test_a_bad_jsonl_request_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"url": "http://127.0.0.1:9/"}\n{"url": "http://x/", "headers": 3}\n')
    done = surge_fetch(str(source), "-o", str(tmp_path / "out.jsonl"), "-q")
    assert done.returncode == 2
    assert done.stderr.strip().endswith(
        'in.jsonl:2: field "headers" must be an object or [name, value] pairs'
    )
    assert len(done.stderr.strip().splitlines()) == 1


def test_headers_remote_ip_and_tls_in_the_records(sim: SimInfo, tmp_path: Path) -> None:
    urls = [sim.url("status-200.sim", tls=True), sim.url("status-404.sim"), "http://127.0.0.1:9/"]
    source = tmp_path / "urls.txt"
    source.write_text("\n".join(urls) + "\n")
    out = tmp_path / "out.jsonl"
    done = surge_fetch(
        str(source), "-o", str(out), "-i", "--resolve", RESOLVE, "--cacert", sim.cafile, "-q"
    )
    assert done.returncode == 0, done.stderr
    got = records(out)
    secure, plain, refused = got[1], got[2], got[3]
    assert secure["remote_ip"] == plain["remote_ip"] == "127.0.0.1"
    tls = secure["tls"]
    assert tls["version"].startswith("TLSv1.") and tls["cipher"] and tls["alpn"] == "http/1.1"
    assert "status-200.sim" in (tls["subject"] or "") or tls["issuer"]
    assert tls["not_after"].endswith("Z")
    assert plain["tls"] is None
    names = [name.lower() for name, _ in secure["headers"]]
    assert "content-length" in names or "transfer-encoding" in names
    assert refused["error"] == "connect_refused" and refused["headers"] is None
    assert refused["remote_ip"] is None


def test_output_dir_names_files_by_url_and_saves_decoded_bodies(
    httpbin: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    port = httpbin.rsplit(":", 1)[1]
    urls = [
        f"{httpbin}/bytes/5000?seed=4",
        f"{httpbin}/gzip",
        f"{httpbin}/../../../../etc/passwd",
        f"{httpbin}/status/500",
        "http://127.0.0.1:9/refused",
    ]
    source = tmp_path / "urls.txt"
    source.write_text("\n".join(urls) + "\n")
    out, folder = tmp_path / "out.jsonl", tmp_path / "bodies"
    done = surge_fetch(str(source), "-o", str(out), "--output-dir", str(folder), "-q")
    assert done.returncode == 0, done.stderr
    got = records(out)
    name = hashlib.sha256(urls[0].encode()).hexdigest()[:32]
    assert got[1]["body_path"] == str(folder / f"127.0.0.1_{port}" / name)
    saved = Path(got[1]["body_path"]).read_bytes()
    assert saved == curl(urls[0]) and got[1]["body_sha256"] == hashlib.sha256(saved).hexdigest()
    assert json.loads(Path(got[2]["body_path"]).read_text())["gzipped"] is True  # decoded
    assert Path(got[3]["body_path"]).resolve().is_relative_to(folder.resolve())
    assert got[4]["status"] == 500 and Path(got[4]["body_path"]).exists()
    assert got[5]["body_path"] is None and got[5]["body_sha256"] is None
    leftovers = [p for p in folder.rglob("*") if p.name.startswith(".surge-")]
    assert leftovers == []


def test_a_warc_holds_every_exchange_byte_exact(httpbin: str, tmp_path: Path) -> None:  # noqa: F811
    warcio = require("warcio.archiveiterator")
    urls = [f"{httpbin}/bytes/3000?seed={n}" for n in range(5)] + [f"{httpbin}/gzip"]
    source = tmp_path / "urls.txt"
    source.write_text("\n".join(urls) + "\n")
    warc = tmp_path / "out.warc.gz"
    # One at a time: httpbin's /bytes seeds one random generator shared by its
    # requests, so concurrent ones would each get a mix (and differ from curl's).
    out = str(tmp_path / "out.jsonl")
    done = surge_fetch(str(source), "-o", out, "--warc", str(warc), "-c", "1", "-q")
    assert done.returncode == 0, done.stderr
    responses: dict[str, bytes] = {}
    requests = 0
    with warc.open("rb") as stream:
        for rec in warcio.ArchiveIterator(stream):
            if rec.rec_type == "response":
                uri = rec.rec_headers.get_header("WARC-Target-URI")
                assert rec.rec_headers.get_header("WARC-IP-Address") == "127.0.0.1"
                responses[uri] = rec.raw_stream.read()
            elif rec.rec_type == "request":
                requests += 1
    assert requests == len(urls) and set(responses) == set(urls)
    for url in urls[:5]:
        assert responses[url] == curl(url)
    assert json.loads(gzip.decompress(responses[urls[5]]))["gzipped"] is True  # as on the wire
    check = subprocess.run(
        [str(Path(sys.executable).parent / "warcio"), "check", str(warc)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def warc_exchanges(*paths: Path) -> list[tuple[str, bytes, int, bytes]]:
    """Each exchange of the WARC files in order: (target URI, request line,
    response status, response payload), after checking that every request
    record is followed by its response."""
    warcio = require("warcio.archiveiterator")
    records = []
    for path in paths:
        with path.open("rb") as stream:
            for rec in warcio.ArchiveIterator(stream):
                if rec.rec_type == "warcinfo":
                    continue
                records.append(
                    (
                        rec.rec_type,
                        rec.rec_headers.get_header("WARC-Target-URI"),
                        rec.rec_headers.get_header("WARC-Record-ID"),
                        rec.rec_headers.get_header("WARC-Concurrent-To"),
                        rec.http_headers.protocol + " " + rec.http_headers.statusline,
                        rec.raw_stream.read(),
                    )
                )
    exchanges = []
    for request, response in zip(records[::2], records[1::2], strict=True):
        assert (request[0], response[0]) == ("request", "response")
        assert request[1] == response[1] and request[3] == response[2]
        status = int(response[4].split()[1])
        exchanges.append((request[1], request[4].encode(), status, response[5]))
    return exchanges


def test_a_warc_holds_every_redirect_hop_as_its_own_exchange(httpbin: str, tmp_path: Path) -> None:  # noqa: F811
    """wget's --warc-file and warcprox write each hop: so does surge fetch -L --warc."""
    seeded = f"{httpbin}/bytes/2000?seed=9"
    urls = [
        f"{httpbin}/redirect/2",  # 302 to /relative-redirect/1, 302 to /get
        f"{httpbin}/redirect-to?url=/bytes/2000%3Fseed%3D9&status_code=307",
    ]
    source = tmp_path / "urls.txt"
    source.write_text("\n".join(urls) + "\n")
    expected_uris = [
        urls[0],
        f"{httpbin}/relative-redirect/1",
        f"{httpbin}/get",
        urls[1],
        seeded,
    ]
    for run, extra in enumerate([[], ["--warc-max-size", "3000"]]):
        warc = tmp_path / f"run{run}.warc.gz"
        out = str(tmp_path / f"run{run}.jsonl")
        done = surge_fetch(
            str(source), "-o", out, "-L", "--warc", str(warc), "-c", "1", "-q", *extra
        )
        assert done.returncode == 0, done.stderr
        got = records(Path(out))
        assert [got[n]["redirects"] for n in (1, 2)] == [2, 1]
        files = rotated_paths(warc)
        assert len(files) == (1 if run == 0 else 5)  # rotated: one exchange a file
        exchanges = warc_exchanges(*files)
        assert [e[0] for e in exchanges] == expected_uris
        assert [e[2] for e in exchanges] == [302, 302, 200, 307, 200]
        for (uri, request_line, _status, _payload), path in zip(
            exchanges, ["/redirect/2", "/relative-redirect/1", "/get"], strict=False
        ):
            assert request_line.startswith(b"GET " + path.encode() + b" HTTP/1.1"), uri
        # every payload byte-exact: the hops' bodies as curl (not following) gets them
        for uri, _line, status, payload in exchanges:
            if status != 200:
                assert payload == curl(uri), uri
        assert json.loads(exchanges[2][3])["url"] == f"{httpbin}/get"
        assert exchanges[4][3] == curl(seeded)
        for path in files:
            check = subprocess.run(
                [str(Path(sys.executable).parent / "warcio"), "check", str(path)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert check.returncode == 0, check.stdout + check.stderr


def test_resume_appends_the_next_inputs_hops_to_the_warc(httpbin: str, tmp_path: Path) -> None:  # noqa: F811
    warcio = require("warcio.archiveiterator")
    source, out, warc = tmp_path / "urls.txt", tmp_path / "out.jsonl", tmp_path / "out.warc.gz"
    first, second = f"{httpbin}/redirect/1", f"{httpbin}/redirect/2"
    source.write_text(first + "\n")
    args = [str(source), "-o", str(out), "-L", "--warc", str(warc), "-c", "1", "-q"]
    assert surge_fetch(*args).returncode == 0
    source.write_text(first + "\n" + second + "\n")
    done = surge_fetch(*args, "--resume")
    assert done.returncode == 0, done.stderr
    assert [e[0] for e in warc_exchanges(warc)] == [
        first,
        f"{httpbin}/get",
        second,
        f"{httpbin}/relative-redirect/1",
        f"{httpbin}/get",
    ]
    with warc.open("rb") as stream:
        types = [rec.rec_type for rec in warcio.ArchiveIterator(stream)]
    assert types.count("warcinfo") == 2  # the appended part starts with its own


def test_a_warc_body_past_the_memory_spool_goes_through_a_file(
    httpbin: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bodies are held as the connection's chunks up to SPOOL_IN_MEMORY, then in
    a file beside the WARC: both kinds land byte-exact."""
    import tempfile

    from surge.bulk import bodies

    made: list[str] = []
    real = tempfile.TemporaryFile

    def temporary_file(**kwargs: Any) -> Any:
        made.append(str(kwargs.get("dir")))
        return real(**kwargs)

    monkeypatch.setattr(bodies, "SPOOL_IN_MEMORY", 2500)
    monkeypatch.setattr(tempfile, "TemporaryFile", temporary_file)
    urls = [f"{httpbin}/bytes/2000?seed=1", f"{httpbin}/bytes/6000?seed=2"]
    warc = tmp_path / "out.warc.gz"
    got = list(surge_fetch_all(urls, warc=str(warc), concurrency=1))
    assert [r["status"] for r in got] == [200, 200]
    assert made == [str(tmp_path)]  # only the larger body, and beside the WARC
    exchanges = warc_exchanges(warc)
    assert [e[3] for e in exchanges] == [curl(u) for u in urls]


def test_the_cluster_refuses_what_it_cannot_do_yet(tmp_path: Path) -> None:
    source = tmp_path / "urls.txt"
    source.write_text("http://127.0.0.1:9/\n")
    for flag in (["--warc", str(tmp_path / "w.warc.gz")], ["--rate-per-host", "1"]):
        done = surge_fetch(str(source), "--cluster", "local:1", *flag)
        assert done.returncode == 2 and "not available with --cluster" in done.stderr


def test_the_pacer_spaces_a_hosts_requests_and_holds_for_retry_after() -> None:
    now = [100.0]
    pacer = HostPacer(4, clock=lambda: now[0])  # a request every 0.25 s per host
    assert [pacer.slot("a") for _ in range(3)] == [0.0, 0.25, 0.5]
    assert pacer.slot("b") == 0.0  # another host: not held by a's queue
    now[0] += 1.0
    assert pacer.slot("a") == 0.0  # the queue drained
    pacer.hold("a", 30)  # Retry-After: 30
    assert pacer.slot("a") == 30.0


def test_the_pacers_table_forgets_hosts_with_nothing_ahead() -> None:
    now = [0.0]
    pacer = HostPacer(10, max_hosts=100, clock=lambda: now[0])
    for i in range(1000):
        pacer.slot(f"host{i}")
        now[0] += 0.01  # each host's slot passes before long
    assert len(pacer) <= 201


def test_rate_per_host_paces_a_run(httpbin: str) -> None:  # noqa: F811
    """Ten inputs for one host at 20 a second, all in flight at once: the tenth
    waited for nine slots before it (a wait the pacer imposes, so a lower bound,
    not a speed)."""
    import surge

    urls = [f"{httpbin}/anything/{n}" for n in range(10)]
    waited = sorted(
        record["elapsed_ms"]
        for record in surge.fetch_all(urls, concurrency=10, rate_per_host=20)
        if record["status"] == 200
    )
    assert len(waited) == 10
    assert waited[-1] >= 9 * 50 * 0.98  # asyncio's timers may fire a hair early


def test_the_same_url_twice_in_flight_saves_one_file(httpbin: str, tmp_path: Path) -> None:  # noqa: F811
    """Two inputs of one URL write two temporary files (one each) and both
    rename to the URL's file: the run completes, both records name it."""
    url = f"{httpbin}/drip?numbytes=2000&duration=0.3"
    source = tmp_path / "urls.txt"
    source.write_text(f"{url}\n" * 4)
    out, folder = tmp_path / "out.jsonl", tmp_path / "bodies"
    done = surge_fetch(str(source), "-o", str(out), "--output-dir", str(folder), "-q")
    assert done.returncode == 0, done.stderr
    got = records(out)
    assert {r["body_path"] for r in got.values()} == {str(FilesFor(folder).path_for(url))}
    assert Path(got[1]["body_path"]).read_bytes() == b"*" * 2000
    assert [p for p in folder.rglob("*") if p.name.startswith(".surge-")] == []


async def test_a_records_only_request_holds_no_body(httpbin: str) -> None:  # noqa: F811
    """What the engine asks of the client when a record needs only the body's
    size: counted and capped as it comes, not kept."""
    from surge.http import AsyncClient

    async with AsyncClient(body_cap=50_000) as client:
        kept = await client.request("GET", f"{httpbin}/bytes/20000")
        counted = await client.request("GET", f"{httpbin}/bytes/20000", _discard=True)
        with pytest.raises(surge_errors.BodyTooLarge):
            await client.request("GET", f"{httpbin}/bytes/90000", _discard=True)
    assert len(kept.content) == kept.bytes == 20_000
    assert counted.content == b"" and counted.bytes == 20_000
    records_ = list(surge_fetch_all([f"{httpbin}/bytes/3000"], keep_body=False))
    assert records_[0]["bytes"] == 3000
