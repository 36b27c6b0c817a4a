"""What the trace outputs write about a request: no userinfo, no secret query
value, no credential header (sanitised as Chrome's HAR export, unless asked),
and a resumed run's HAR and page say they cover that run only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.conftest import RESOLVE
from tests.trace.conftest import surge

from surge.sim import SimInfo
from surge.trace.redact import (
    REDACTED,
    command_label,
    safe_headers,
    safe_peer,
    safe_record,
    safe_text,
    safe_url,
    without_query,
)

R = REDACTED


@pytest.mark.parametrize(
    ("given", "written"),
    [
        ("http://h/p", "http://h/p"),
        ("http://u:pw@h/p", "http://h/p"),
        ("https://u@h:8443/p?q=1", "https://h:8443/p?q=1"),
        ("http://u:p%40w@h/", "http://h/"),  # an escaped @ inside the password
        ("http://a@b@h/", "http://h/"),  # the last @ ends the userinfo, as urlsplit reads it
        ("http://u:pw@h", "http://h"),
        ("http://u:pw@h?token=t", f"http://h?token={R}"),
        ("http://h/p@x?y=1", "http://h/p@x?y=1"),  # an @ in the path is the path's
        ("http://h/?access_token=t&a=1", f"http://h/?access_token={R}&a=1"),
        (
            "http://h/?X-Amz-Signature=s&X-Amz-Credential=c",
            f"http://h/?X-Amz-Signature={R}&X-Amz-Credential={R}",
        ),
        (
            "http://h/?X-Amz-Security-Token=s&x-id=GetObject",
            f"http://h/?X-Amz-Security-Token={R}&x-id=GetObject",
        ),
        ("http://h/?api-key=k&key=k2&sig=s", f"http://h/?api-key={R}&key={R}&sig={R}"),
        ("http://h/?client_secret=s&password=p", f"http://h/?client_secret={R}&password={R}"),
        ("http://h/?id=1&page=2&q=token", "http://h/?id=1&page=2&q=token"),  # a value is not a name
        ("http://h/?token=&token", "http://h/?token=&token"),  # nothing to hide
        # a fragment's a=b pairs too: OAuth's implicit flow puts the token there
        ("http://h/?a=1&token=t#frag?token=x", f"http://h/?a=1&token={R}#frag?token={R}"),
        ("http://h/cb#access_token=t&state=s", f"http://h/cb#access_token={R}&state=s"),
        ("http://h/#token=t", f"http://h/#token={R}"),
        ("http://h/#section-2", "http://h/#section-2"),  # an anchor is not a parameter
        ("http://h/?x=%23&token=t", f"http://h/?x=%23&token={R}"),  # an escaped # is the query's
        # the name as the server reads it: percent- and plus-decoded, ';' a separator
        ("http://h/?%61ccess_token=t", f"http://h/?%61ccess_token={R}"),
        ("http://h/?access%5Ftoken=t", f"http://h/?access%5Ftoken={R}"),
        ("http://h/?api+key=t&api%20key=u", f"http://h/?api+key={R}&api%20key={R}"),
        ("http://h/?a=1;token=t;b=2", f"http://h/?a=1;token={R};b=2"),
        ("http://h/?token=abc=def", f"http://h/?token={R}"),  # the whole value
        ("http://h/?token=a&token=b", f"http://h/?token={R}&token={R}"),  # every one
        # relative and scheme-relative (a Location)
        ("/ok?access_token=t", f"/ok?access_token={R}"),
        ("//eve:pw@h:81/ok", "//h:81/ok"),
        ("/login?next=x://y", "/login?next=x://y"),  # a '://' in the query is no scheme
        ("http://bob:pw@[::1]:8/", "http://[::1]:8/"),
        ("http://bob:pw@[::1/", "http://[::1/"),  # not a URL: the same places taken out
        ("http://h/?%74oken=t", f"http://h/?%74oken={R}"),  # the name as the server reads it
        ("user:pw@h/p", "h/p"),  # not a URL (invalid_url): the same places taken out
        ("http://h/%2E%2E/./a?b=c", "http://h/%2E%2E/./a?b=c"),  # the rest: bytes as given
    ],
)
def test_safe_url(given: str, written: str) -> None:
    assert safe_url(given) == written
    # written twice, the same: --resume folds inputs as the records wrote them
    assert safe_url(written) == written


@given(st.text(alphabet="ab:@/?#&;=%+ tokenTOKEN", max_size=40))
def test_safe_url_written_twice_is_written_the_same(url: str) -> None:
    once = safe_url(url)
    assert safe_url(once) == once


def test_safe_text_finds_parameters_a_url_match_misses() -> None:
    # a space cuts the URL short: its token is found all the same
    assert safe_text("bad URL: 'http://exa mple/?access_token=t&a=1'") == (
        f"bad URL: 'http://exa mple/?access_token={R}&a=1'"
    )


@pytest.mark.parametrize("keep", [False, True], ids=["sanitised", "with-secrets"])
def test_safe_headers_request_and_response(keep: bool) -> None:
    headers = [
        ("Location", "http://eve:pw@h/?token=t&a=1"),
        ("Set-Cookie", "sid=s"),
        ("Authorization", "Bearer b"),
        ("Content-Location", "//eve:pw@h/x"),
        ("Content-Type", "text/plain"),
    ]
    query = "token=t" if keep else f"token={R}"
    kept = [("Set-Cookie", "sid=s"), ("Authorization", "Bearer b")] if keep else []
    assert safe_headers(headers, keep_secrets=keep) == [
        ("Location", f"http://h/?{query}&a=1"),  # never the userinfo, even with secrets
        *kept,
        ("Content-Location", "//h/x"),
        ("Content-Type", "text/plain"),
    ]


def test_safe_record_and_safe_peer() -> None:
    record = {
        "url": "http://u:pw@h/?token=t",
        "input": "u:pw@h/?token=t",
        "final_url": "http://h/#access_token=t",
        "error_detail": "no host in URL: 'http://u:pw@/'",
        "headers": [["Location", "http://eve:pw@h/"], ["Set-Cookie", "sid=s"]],
        "status": 200,
    }
    assert safe_record(record) == {
        "url": f"http://h/?token={R}",
        "input": f"h/?token={R}",
        "final_url": f"http://h/#access_token={R}",
        "error_detail": "no host in URL: 'http:///'",
        "headers": [["Location", "http://h/"]],
        "status": 200,
    }
    plain = {"url": "http://h/", "input": "h", "final_url": None, "error_detail": None}
    assert safe_record(plain) is plain  # nothing to take out: not copied
    assert safe_peer("eve:pw@127.0.0.1:80") == "127.0.0.1:80"
    assert safe_peer("[::1]:80") == "[::1]:80"


def test_safe_text_treats_every_url_in_a_detail() -> None:
    text = "not an http(s) URL (scheme 'ftp'): 'ftp://u:pw@h/x?token=t' then http://a:b@c/"
    assert (
        safe_text(text)
        == f"not an http(s) URL (scheme 'ftp'): 'ftp://h/x?token={R}' then http://c/"
    )
    assert without_query("http://u:p@h/a?b=c#d") == "http://h/a"


@pytest.mark.parametrize(
    ("argv", "label"),
    [
        (["python"], "python"),
        (["/usr/bin/python3", "prog.py"], "python3 (+1 argument)"),
        (["tool", "http://user:s3cr3t@h/?token=abc"], "tool (+1 argument)"),
        (["env", "PGPASSWORD=hunter2", "python", "x.py"], "env (+3 arguments)"),
        (["PGPASSWORD=hunter2"], "(a command)"),
        ([], "(no command)"),
    ],
)
def test_command_label_is_the_program_and_a_count(argv: list[str], label: str) -> None:
    assert command_label(argv) == label


def _fetch(sim: SimInfo, tmp_path: Path, url: str, *extra: str) -> dict[str, object]:
    source = tmp_path / "urls.txt"
    source.write_text(url + "\n")
    har = tmp_path / "run.har"
    done = surge(
        "fetch", str(source), "-o", str(tmp_path / "out.jsonl"), "--har", str(har),
        "--resolve", RESOLVE, "--max-time", "5", "-L", *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    log: dict[str, object] = json.loads(har.read_text())["log"]
    return log


def test_har_credentials_only_on_the_hops_they_were_sent_to(sim: SimInfo, tmp_path: Path) -> None:
    """--har-with-secrets: a redirect to another host got no Authorization (surge's
    credential rule), and its entry says so; the other headers went to both."""
    url = sim.url("redirect-1.sim")
    headers = ("-H", "Authorization: Bearer abc", "-H", "X-Trace: 1")
    log = _fetch(sim, tmp_path, url, *headers, "--har-with-secrets")
    first, second = log["entries"]  # type: ignore[misc]
    assert first["request"]["headers"] == [
        {"name": "Authorization", "value": "Bearer abc"},
        {"name": "X-Trace", "value": "1"},
    ]
    assert second["request"]["url"] != first["request"]["url"]
    assert second["request"]["headers"] == [{"name": "X-Trace", "value": "1"}]


def test_a_failed_requests_detail_has_no_userinfo(sim: SimInfo, tmp_path: Path) -> None:
    log = _fetch(sim, tmp_path, "ftp://user:pw-detail@status-200.sim/x?token=t")
    [entry] = log["entries"]  # type: ignore[misc]
    assert entry["_error"] == "invalid_url"
    assert "pw-detail" not in json.dumps(entry) and "token=t" not in json.dumps(entry)


def test_a_resumed_runs_har_and_page_say_they_cover_that_run_only(
    sim: SimInfo, tmp_path: Path
) -> None:
    """The records are appended; the HAR and the page are the run's own.  Today
    neither says so: a HAR of the resumed half reads as the whole job."""
    source = tmp_path / "urls.txt"
    source.write_text("".join(sim.url(f"a{n}.sim") + "\n" for n in range(4)))
    out = tmp_path / "out.jsonl"
    common = ("--resolve", RESOLVE, "--max-time", "5", "-o", str(out))
    first = tmp_path / "first"
    second = tmp_path / "second"
    done = surge("fetch", str(source), *common, "--har", f"{first}.har", "--trace", f"{first}.html")
    assert done.returncode == 0, done.stderr
    source.write_text(source.read_text() + sim.url("a9.sim") + "\n")
    done = surge(
        "fetch", str(source), *common, "--resume",
        "--har", f"{second}.har", "--trace", f"{second}.html",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == 5
    whole = json.loads(Path(f"{first}.har").read_text())["log"]
    resumed = json.loads(Path(f"{second}.har").read_text())["log"]
    assert "comment" not in whole
    assert len(resumed["entries"]) == 1
    assert "--resume" in resumed["comment"] and "only" in resumed["comment"]
    page = Path(f"{second}.html").read_text()
    data = json.loads(page.split('id="trace-data">', 1)[1].split("</script>", 1)[0])
    assert data["requests"] == 1 and data["note"] == resumed["comment"]
    assert "data.note" in page  # the page shows it under its title
