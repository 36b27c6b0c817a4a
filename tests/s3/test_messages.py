"""What surge says: one line per object however its key is spelled (control
characters escaped as ``ls -b`` escapes them), an AccessDenied that names
the key, and help that says what an upload really carries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from tests.s3._buckets import Buckets
from tests.s3.test_cp import cli, new_bucket

from surge.cli import main
from surge.s3 import Credentials
from surge.s3.minio import MinioServer


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("plain/key.txt", "plain/key.txt"),
        ("with space and ümlaut 日本", "with space and ümlaut 日本"),
        ("back\\slash", "back\\\\slash"),  # as ls -b: the escape character escaped
        ("new\nline", "new\\nline"),
        ("tab\tcr\rbell\a", "tab\\tcr\\rbell\\a"),
        ("esc\x1b[31mred", "esc\\033[31mred"),
        ("del\x7f", "del\\177"),
        ("c1\x9b", "c1\\302\\233"),  # UTF-8 bytes, as ls -b
    ],
)
def test_control_characters_are_escaped_as_ls_escapes_them(key: str, shown: str) -> None:
    from surge.s3.cli import escape_key

    assert escape_key(key) == shown
    assert "\n" not in escape_key(key)


@pytest.fixture()
def minio_buckets(minio: MinioServer, s3: Any) -> Buckets:
    return Buckets(minio.endpoint_url, Credentials(minio.access_key, minio.secret_key), s3)


def invoke(server: Buckets, *args: str) -> tuple[int, str, str]:
    env = {
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    result = CliRunner().invoke(main, ["s3", *args, "--endpoint-url", server.endpoint_url], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_a_key_with_a_newline_is_one_line_everywhere(
    minio_buckets: Buckets, tmp_path: Path
) -> None:
    bucket = new_bucket(minio_buckets, {"a\nb": b"x", "plain": b"y"})
    code, out, err = invoke(minio_buckets, "ls", f"s3://{bucket}/", "--recursive")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and sorted(line.rsplit(" ", 1)[1] for line in lines) == [
        "a\\nb",
        "plain",
    ]
    code, out, err = invoke(minio_buckets, "ls", f"s3://{bucket}/", "--recursive", "--json")
    assert sorted(json.loads(line)["key"] for line in out.splitlines()) == ["a\nb", "plain"]
    code, out, err = invoke(minio_buckets, "cp", "-r", f"s3://{bucket}/", str(tmp_path / "d"))
    assert code == 0, err
    assert len(out.splitlines()) == 2 and f"s3://{bucket}/a\\nb to " in out
    assert (tmp_path / "d" / "a\nb").read_bytes() == b"x"  # the file is named as the key
    code, out, err = invoke(minio_buckets, "ls", f"s3://{bucket}/", "--all-versions")
    assert len(out.splitlines()) == 2 and "a\\nb" in out


def test_access_denied_names_the_key(minio_buckets: Buckets, tmp_path: Path) -> None:
    bucket = new_bucket(minio_buckets, {"secret/k": b"k"})
    (tmp_path / "f").write_bytes(b"f")
    anonymous = ["--no-sign-request"]
    code, _out, err = cli(minio_buckets, f"s3://{bucket}/secret/k", str(tmp_path / "k"), *anonymous)
    assert code == 1
    assert "AccessDenied: access denied to key 'secret/k'" in err
    code, _out, err = cli(minio_buckets, str(tmp_path / "f"), f"s3://{bucket}/up/f", *anonymous)
    assert code == 1
    assert "AccessDenied:" in err and "(key 'up/f')" in err


def test_cp_help_says_what_an_upload_carries() -> None:
    result = CliRunner().invoke(main, ["s3", "cp", "--help"])
    text = " ".join(result.output.split())
    assert "Content-MD5" not in text
    assert "CRC32" in text
    for flag in ("--read-timeout", "--connect-timeout", "--no-follow-symlinks", "--debug"):
        assert flag in text


def _unescape(shown: str) -> str:
    """What ``ls -b``'s escapes stand for, undone: the key again."""
    named = {"a": "\a", "b": "\b", "t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r"}
    out = bytearray()
    i = 0
    while i < len(shown):
        char = shown[i]
        if char != "\\":
            out += char.encode()
            i += 1
        elif shown[i + 1] in named:
            out += named[shown[i + 1]].encode()
            i += 2
        elif shown[i + 1] == "\\":
            out += b"\\"
            i += 2
        else:
            out.append(int(shown[i + 1 : i + 4], 8))
            i += 4
    return out.decode()


@given(st.text())
def test_an_escaped_key_has_no_control_character_and_others_are_untouched(key: str) -> None:
    from surge.s3.cli import escape_key

    shown = escape_key(key)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)
    if not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c == "\\" for c in key):
        assert shown == key
    # unambiguous: the line gives back the one key it was made of
    assert _unescape(shown) == key


def _transfer_cli(server: Buckets, *args: str) -> tuple[int, str, str]:
    env = {
        "AWS_ACCESS_KEY_ID": server.credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": server.credentials.secret_key,
    }
    command = [args[0], "--endpoint-url", server.endpoint_url, "--no-progress", *args[1:]]
    result = CliRunner().invoke(main, ["s3", *command], env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("count", "summary"),
    [(1, "1 object,"), (2, "2 objects,"), (0, "0 objects,")],
)
@pytest.mark.parametrize("way", ["cp up", "cp down", "sync up", "sync down"])
def test_a_summary_counts_in_english(
    moto_s3: Buckets, tmp_path: Path, way: str, count: int, summary: str
) -> None:
    """ "uploaded 1 object", never "1 objects" - up and down, cp and sync."""
    files = {f"f{i}.txt": b"x" for i in range(count)}
    local = tmp_path / "local"
    local.mkdir()
    command, direction = way.split()
    if direction == "up":
        for name, body in files.items():
            (local / name).write_bytes(body)
        bucket = new_bucket(moto_s3, {})
        args = [str(local), f"s3://{bucket}/"]
    else:
        bucket = new_bucket(moto_s3, files)
        args = [f"s3://{bucket}/", str(local)]
    recursive = ["--recursive"] if command == "cp" else []
    code, _out, err = _transfer_cli(moto_s3, command, *args, *recursive)
    assert code == 0, err
    assert f"loaded {summary}" in err, err
    if count == 1:
        assert "1 objects" not in err


@pytest.mark.parametrize("way", ["cp up", "cp down", "sync up", "sync down"])
def test_only_show_errors_prints_no_summary(moto_s3: Buckets, tmp_path: Path, way: str) -> None:
    """The AWS CLI's --only-show-errors: errors and warnings only - no line
    per object and no summary; an error still shows."""
    local = tmp_path / "local"
    local.mkdir()
    command, direction = way.split()
    if direction == "up":
        (local / "f.txt").write_bytes(b"x")
        bucket = new_bucket(moto_s3, {})
        args = [str(local), f"s3://{bucket}/"]
    else:
        bucket = new_bucket(moto_s3, {"f.txt": b"x", "../escape": b"e"})
        args = [f"s3://{bucket}/", str(local)]
    recursive = ["--recursive"] if command == "cp" else []
    code, out, err = _transfer_cli(moto_s3, command, *args, *recursive, "--only-show-errors")
    assert out == ""
    if direction == "up":
        assert (code, err) == (0, "")
    else:  # the key that would escape is an error line, and the only line
        assert code == 1
        assert err.splitlines() == [f"skipping s3://{bucket}/../escape: {_ESCAPES}"], err


_ESCAPES = "the key would be written outside the destination directory"
