"""Each command imports only what it uses (issue #38): ``surge --help`` and
``--version`` no engine at all; ``surge fetch`` and ``surge trace`` the HTTP
engine and their own modules, and the WARC, HAR, trace-page, body-file,
proxy, cookie and c-ares code only when an option or a response asks for it.

Every command runs in a child interpreter against a real nginx on loopback;
the test reads the child's ``sys.modules`` (tests/_loaded.py).  It counts
imports, never times them: benchmarks/startup.py measures what they cost.
The S3 commands' tests are in tests/s3/test_startup.py.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from tests._loaded import COMMAND_LINE, ENGINE_PACKAGES, HTTP_ENGINE, loaded_by
from tests._nginx import free_port, nginx

from surge.cli import SUBCOMMANDS, SUMMARIES, main
from surge.sim.dns import DNSServer, Entry, Zone, running

#: What surge fetch loads besides the engine, for one URL in a text file.
FETCH = frozenset(
    {
        "surge.bulk",
        "surge.bulk.cli",
        "surge.bulk.engine",
        "surge.bulk.inputs",
        "surge.bulk.limits",
        "surge.bulk.outputs",
        "surge.bulk.pacing",
        "surge.bulk.summary",
        "surge.gc_tuning",
        "surge.histogram",
        "surge.trace",
        "surge.trace.redact",  # the records' URLs, headers and error details
        "surge.trace.tracer",
    }
)
#: surge.trace.redact: what every writer of URLs and headers writes them through.
TRACE = frozenset({"surge.trace", "surge.trace.cli", "surge.trace.redact"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """nginx on 127.0.0.1: ``/`` answers 200, ``/cookie`` sets a cookie; the base URL."""
    port = free_port()
    servers = f"""
    server {{
        listen 127.0.0.1:{port};
        location = / {{ return 200 "ok\\n"; }}
        location = /cookie {{ add_header Set-Cookie "id=1; Path=/"; return 200 "ok\\n"; }}
    }}
"""
    with nginx(tmp_path_factory.mktemp("nginx"), servers, wait_port=port):
        yield f"http://127.0.0.1:{port}"


def _surplus(loaded: frozenset[str], expected: frozenset[str]) -> list[str]:
    return sorted(loaded - expected)


@pytest.mark.parametrize("option", ["--help", "--version"])
def test_help_and_version_load_no_engine(option: str, tmp_path: Path) -> None:
    loaded = loaded_by(option, tmp=tmp_path)
    assert loaded.status == 0, loaded.output
    assert loaded.surge == COMMAND_LINE
    assert loaded.third_party == {"click"}
    assert not loaded.heavy  # no asyncio, no ssl


def test_help_lists_every_command_from_its_summary(tmp_path: Path) -> None:
    loaded = loaded_by("--help", tmp=tmp_path)
    for name in SUBCOMMANDS:
        assert f"  {name} " in loaded.output
    assert set(SUMMARIES) == set(SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_summary_is_its_commands_first_sentence(name: str) -> None:
    # The table --help reads instead of importing the commands: kept true here.
    command = main.get_command(click.Context(main), name)
    assert command is not None
    assert command.get_short_help_str(limit=1000) == SUMMARIES[name]


def test_fetch_of_one_url_loads_the_engine_and_fetch_only(site: str, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{site}/\n")
    loaded = loaded_by("fetch", str(urls), "-q", tmp=tmp_path)
    assert loaded.status == 0, loaded.output
    assert '"status":200' in loaded.output
    assert _surplus(loaded.surge, COMMAND_LINE | HTTP_ENGINE | FETCH) == []
    assert loaded.surge >= HTTP_ENGINE | FETCH
    assert loaded.third_party == ENGINE_PACKAGES
    assert loaded.heavy == {"asyncio", "ssl"}


def test_trace_of_one_url_loads_the_engine_and_trace_only(site: str, tmp_path: Path) -> None:
    loaded = loaded_by("trace", f"{site}/", tmp=tmp_path)
    assert loaded.status == 0, loaded.output
    assert _surplus(loaded.surge, COMMAND_LINE | HTTP_ENGINE | TRACE) == []
    assert loaded.third_party == ENGINE_PACKAGES
    assert loaded.heavy == {"asyncio", "ssl"}


def test_doctor_loads_no_engine(tmp_path: Path) -> None:
    loaded = loaded_by("doctor", tmp=tmp_path)
    assert loaded.status in (0, 1), loaded.output  # 1: a finding (this machine's)
    assert not any(m.startswith(("surge.http", "surge.pool", "surge.s3")) for m in loaded.surge)
    assert loaded.third_party == {"click"}
    assert not loaded.heavy & {"asyncio", "ssl", "http.cookiejar"}


#: A fetch option (or what a response or a URL asks) -> the modules it loads:
#: none of them is loaded by a plain fetch (test_fetch_of_one_url_...).
ASKED = [
    (["--warc", "{tmp}/out.warc.gz"], "{site}/", {"surge.bulk.warc"}),
    (["--har", "{tmp}/out.har"], "{site}/", {"surge.trace.har"}),
    (["--trace", "{tmp}/trace.html"], "{site}/", {"surge.trace.recorder", "surge.trace.html"}),
    (["--output-dir", "{tmp}/bodies"], "{site}/", {"surge.bulk.bodies"}),
    (["--proxy", "{site}"], "{site}/", {"surge.http.proxy"}),
    (["--dns-servers", "{dns}"], "{named}/", {"surge.http.cares"}),
]


@pytest.fixture(scope="module")
def dns() -> Iterator[DNSServer]:
    """A nameserver on loopback that knows ``site.test`` (127.0.0.1)."""
    with running(Zone({"site.test": Entry(a=("127.0.0.1",))})) as server:
        yield server


@pytest.mark.parametrize(("options", "url", "modules"), ASKED)
def test_what_an_option_asks_for_is_loaded_then(
    site: str, dns: DNSServer, tmp_path: Path, options: list[str], url: str, modules: set[str]
) -> None:
    assert not modules & (COMMAND_LINE | HTTP_ENGINE | FETCH | {"asyncio", "ssl"})
    named = site.replace("127.0.0.1", "site.test")
    fill = {"tmp": tmp_path, "site": site, "named": named, "dns": dns.server_spec}
    urls = tmp_path / "urls.txt"
    urls.write_text(url.format(**fill) + "\n")
    given = [option.format(**fill) for option in options]
    asked = loaded_by("fetch", str(urls), "-q", *given, tmp=tmp_path)
    assert asked.status == 0, asked.output
    assert '"status":200' in asked.output
    loaded = asked.surge | asked.heavy
    assert loaded >= modules, sorted(modules - loaded)


def test_cookies_load_with_the_first_cookie(site: str, tmp_path: Path) -> None:
    # surge trace keeps cookies (a client's default): loaded when one is set.
    plain = loaded_by("trace", f"{site}/", tmp=tmp_path)
    assert not (plain.surge | plain.heavy) & {"surge.http.cookies", "http.cookiejar"}
    loaded = loaded_by("trace", f"{site}/cookie", tmp=tmp_path)
    assert loaded.status == 0, loaded.output
    assert {"surge.http.cookies", "http.cookiejar"} <= loaded.surge | loaded.heavy
    # surge fetch keeps none (each record stands alone): never loaded.
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{site}/cookie\n")
    fetched = loaded_by("fetch", str(urls), "-q", tmp=tmp_path)
    assert '"status":200' in fetched.output
    assert not (fetched.surge | fetched.heavy) & {"surge.http.cookies", "http.cookiejar"}


def test_the_command_line_freezes_what_its_command_loaded(site: str, tmp_path: Path) -> None:
    # The process is the command's: its modules are never garbage, so the
    # collector (at exit too) is told to skip them.
    loaded = loaded_by("trace", f"{site}/", tmp=tmp_path)
    assert loaded.status == 0, loaded.output
    assert loaded.frozen > 10_000
    assert loaded.collecting  # off while the command loaded, on again for its run


def test_a_caller_of_main_keeps_its_collector_as_it_was() -> None:
    before = gc.get_freeze_count()
    result = CliRunner().invoke(main, ["trace", "--help"])
    assert result.exit_code == 0, result.output
    assert gc.get_freeze_count() == before
