"""Hostile round 2 on S3 keys: a key (or prefix) is opaque bytes as the user
named it, in every command and both directions; a key with ``..`` never
reaches another bucket; a download never writes outside its destination.

Written from docs/s3.md and ``--help`` only.  boto3 is the reference: the
same key is put (or listed) by boto3 in a reference bucket of the same server,
and surge must end up with exactly what boto3 ended up with.  Every case runs
against MinIO and moto (moto takes dot segments that MinIO refuses).
"""

from __future__ import annotations

import fnmatch
import json
import os
import unicodedata
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.hostile.conftest import run
from tests.s3.conftest import moto_s3

from surge.s3.minio import MinioServer

__all__ = ["moto_s3"]  # the moto fixture, for this module

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


@dataclass
class Server:
    name: str
    client: Any
    env: dict[str, str]
    made: list[str]

    def new_bucket(self, prefix: str = "h2") -> str:
        bucket = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client.create_bucket(Bucket=bucket)
        self.made.append(bucket)
        return bucket

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        found: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            found += [o["Key"] for o in page.get("Contents", [])]
        return found

    def contents(self, bucket: str) -> dict[str, bytes]:
        return {
            k: self.client.get_object(Bucket=bucket, Key=k)["Body"].read()
            for k in self.keys(bucket)
        }

    def put(self, bucket: str, key: str, body: bytes) -> bool:
        """boto3's put of the key: whether the server took it."""
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=body)
        except Exception:
            return False
        return True

    def snapshot(self) -> dict[str, dict[str, bytes]]:
        """The server's bucket names, and the objects of every bucket this test made."""
        names = sorted(b["Name"] for b in self.client.list_buckets()["Buckets"])
        return {"": {n: b"" for n in names}} | {n: self.contents(n) for n in self.made}


def _env(endpoint: str, access: str, secret: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("AWS_") and "proxy" not in k.lower()
    }
    env.update(
        AWS_ACCESS_KEY_ID=access,
        AWS_SECRET_ACCESS_KEY=secret,
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_ENDPOINT_URL=endpoint,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


@pytest.fixture(params=["minio", "moto"])
def srv(request: pytest.FixtureRequest) -> Server:
    if request.param == "minio":
        minio: MinioServer = request.getfixturevalue("minio")
        client = request.getfixturevalue("s3")
        return Server(
            "minio", client, _env(minio.endpoint_url, minio.access_key, minio.secret_key), []
        )
    moto = request.getfixturevalue("moto_s3")
    creds = moto.credentials
    return Server("moto", moto.s3, _env(moto.endpoint_url, creds.access_key, creds.secret_key), [])


@pytest.fixture
def victim(srv: Server) -> Iterator[str]:
    """A bucket a ``..`` key might reach: ``victim-<hex>`` with one object."""
    name = srv.new_bucket("victim")
    srv.client.put_object(Bucket=name, Key="k", Body=b"victim's")
    yield name


#: Keys, with ``{V}`` standing for the victim bucket's name.
KEYS = [
    "a/../b",
    "../{V}/k",
    "../{V}/new",
    "a/b/../../../{V}/x",
    "./k",
    "a/./b",
    "a/.",
    "a/..",
    "..",
    ".",
    "...",
    ".../x",
    "a//b",
    "/lead",
    "//lead",
    "%2e%2e/{V}/k",
    "%2E%2E%2F{V}%2Fk",
    "a%2Fb",
    "a%252Fb",
    "a%b",
    "a\\..\\b",
    "..\\{V}\\k",
    "a?b",
    "a?x-id=1",
    "a#b",
    "#",
    "a;b",
    "a=b&c=d",
    "a+b c",
    NFC,
    NFD,
    "\u202eabc.txt",
    "a\u200bb",
    "\ufeffbom",
    "a\nb",
    "a\tb",
    "{V}",
    "{V}/k",
    "k" * 1024,
    "k" * 1025,
    "\u00e9" * 512,
    "K",
]


def ids(keys: list[str]) -> list[str]:
    return [ascii(k)[:40] for k in keys]


def surge_url(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


# -- uploads: the key the server holds is boto3's --------------------------------------


@pytest.mark.parametrize("key", KEYS, ids=ids(KEYS))
def test_upload_holds_the_key_boto3_holds(
    srv: Server, victim: str, key: str, tmp_path: Path
) -> None:
    key = key.replace("{V}", victim)
    ref, target = srv.new_bucket(), srv.new_bucket()
    boto_took = srv.put(ref, key, b"body")
    before = srv.snapshot()
    del before[target]
    local = tmp_path / "f"
    local.write_bytes(b"body")
    done = run(["s3", "cp", str(local), surge_url(target, key)], env=srv.env)
    after = srv.snapshot()
    del after[target]
    assert after == before, f"another bucket changed: {done.stderr.decode()}"
    if boto_took:
        assert done.returncode == 0, done.stderr.decode()
        assert srv.keys(target) == srv.keys(ref), done.stderr.decode()
        assert srv.contents(target) == {k: b"body" for k in srv.keys(ref)}
    else:
        assert done.returncode != 0
        assert srv.keys(target) == []


# -- single-object download: the object boto3 put, read back -----------------------------


@pytest.mark.parametrize("key", KEYS, ids=ids(KEYS))
def test_download_of_one_key_reads_that_key(
    srv: Server, victim: str, key: str, tmp_path: Path
) -> None:
    key = key.replace("{V}", victim)
    source = srv.new_bucket()
    took = srv.put(source, key, b"the object")
    out = tmp_path / "out" / "file.bin"
    out.parent.mkdir()
    done = run(["s3", "cp", surge_url(source, key), str(out)], env=srv.env)
    if not took:  # the server refused boto3's put: nothing to read, nothing written
        assert done.returncode != 0
        assert list(out.parent.iterdir()) == []
        assert _all_files(tmp_path) == {}
        return
    assert done.returncode == 0, done.stderr.decode()
    assert out.read_bytes() == b"the object"
    assert sorted(p.name for p in out.parent.iterdir()) == ["file.bin"]


# -- recursive download: every key under the destination or skipped ----------------------


def _all_files(root: Path) -> dict[str, bytes]:
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            found[str(p.relative_to(root))] = p.read_bytes()
    return found


def _expected_path(key: str) -> str | None:
    """docs/s3.md: a key becomes a path by its /-segments, empty and ``.`` dropped;
    a ``..`` segment or a leading ``/`` is skipped; a trailing ``/`` is a
    folder marker (no file)."""
    if key.startswith("/") or key.endswith("/"):
        return None
    segments = key.split("/")
    if ".." in segments:
        return None
    kept = [s for s in segments if s not in ("", ".")]
    if any(len(s.encode()) > 255 for s in kept):  # NAME_MAX: no such file can exist
        return None
    return "/".join(kept) if kept else None


@pytest.mark.parametrize("command", ["cp", "sync"])
@pytest.mark.parametrize("key", KEYS, ids=ids(KEYS))
def test_recursive_download_writes_inside_the_destination_only(
    srv: Server, victim: str, key: str, command: str, tmp_path: Path
) -> None:
    key = key.replace("{V}", victim)
    source = srv.new_bucket()
    took = srv.put(source, key, b"odd")
    srv.client.put_object(Bucket=source, Key="plain", Body=b"plain")
    (tmp_path / "outside").mkdir()
    sentinel = tmp_path / "outside" / "k"
    sentinel.write_bytes(b"mine")
    dest = tmp_path / "outside" / "dest"
    args = ["s3", command, f"s3://{source}/", str(dest)]
    if command == "cp":
        args.append("--recursive")
    done = run(args, env=srv.env)
    files = _all_files(tmp_path)
    expected = {"outside/k": b"mine", "outside/dest/plain": b"plain"}
    stored = [k for k in srv.keys(source) if k != "plain"]  # the server's spelling
    key = stored[0] if stored else key
    path = _expected_path(key) if took else None
    if path is not None and path != "plain":
        expected[f"outside/dest/{path}"] = b"odd"
    assert files == expected, done.stderr.decode()
    if took and path is None and not key.endswith("/"):
        assert done.returncode == 1, done.stderr.decode()
        assert key.encode() in done.stderr or b"skipping" in done.stderr
    else:
        assert done.returncode == 0, done.stderr.decode()


# -- listing: a prefix is the prefix, never resolved ---------------------------------------

PREFIXES = [
    "a/../",
    "a/..",
    "../",
    "..",
    "../{V}/",
    "./",
    "a/./",
    ".../",
    "a//",
    "%2e%2e/",
    "a%2F",
    "a\\",
    "a?",
    "a#",
    NFD,
    NFC,
    "{V}",
    "A",
]

LISTED = [
    "a/../b",
    "a/../c/d",
    "a/./b",
    "a//b",
    "a/b",
    "a%2Fb",
    "a\\b",
    "a?b",
    "a#b",
    "../{V}/k",
    "../x",
    "./k",
    ".../z",
    "%2e%2e/y",
    NFC + "/1",
    NFD + "/2",
    "{V}/k",
    "A/1",
    "a/1",
]


@pytest.mark.parametrize("prefix", PREFIXES, ids=ids(PREFIXES))
def test_ls_of_a_prefix_lists_what_boto3_lists(
    srv: Server, victim: str, prefix: str, tmp_path: Path
) -> None:
    prefix = prefix.replace("{V}", victim)
    source = srv.new_bucket()
    for key in LISTED:
        srv.put(source, key.replace("{V}", victim), b"x")
    done = run(
        ["s3", "ls", f"s3://{source}/{prefix}", "--recursive", "--json", "--parallel", "1"],
        env=srv.env,
    )
    try:
        expected = sorted(srv.keys(source, prefix))
    except Exception:  # the server refuses the prefix to boto3 too: an error, no lines
        assert done.returncode != 0 and done.stdout == b"", done.stdout
        return
    listed = sorted(json.loads(line)["key"] for line in done.stdout.decode().splitlines())
    assert listed == expected, done.stderr.decode()
    assert done.returncode == (0 if expected else 1), done.stderr.decode()


@pytest.mark.parametrize("prefix", PREFIXES, ids=ids(PREFIXES))
def test_ls_one_level_of_a_prefix_is_boto3s(srv: Server, victim: str, prefix: str) -> None:
    """One level (``PRE`` lines and objects) as list_objects_v2 with Delimiter='/'."""
    prefix = prefix.replace("{V}", victim)
    source = srv.new_bucket()
    for key in LISTED:
        srv.put(source, key.replace("{V}", victim), b"x")
    try:
        page = srv.client.list_objects_v2(Bucket=source, Prefix=prefix, Delimiter="/")
    except Exception:  # the server refuses the prefix to boto3 too: an error, no lines
        refused = run(["s3", "ls", f"s3://{source}/{prefix}", "--parallel", "1"], env=srv.env)
        assert refused.returncode != 0 and refused.stdout == b"", refused.stdout
        return
    # aws s3 ls prints a common prefix as "PRE name/" and an object by the part
    # after the last "/" of the prefix given.
    cut = prefix.rfind("/") + 1
    expected = sorted(
        [("PRE", p["Prefix"][cut:]) for p in page.get("CommonPrefixes", [])]
        + [("OBJ", o["Key"][cut:]) for o in page.get("Contents", [])]
    )
    done = run(["s3", "ls", f"s3://{source}/{prefix}", "--parallel", "1"], env=srv.env)
    got = []
    for line in done.stdout.decode().splitlines():
        if line.lstrip().startswith("PRE "):
            got.append(("PRE", line.lstrip()[4:]))
        else:
            got.append(("OBJ", line.split(None, 3)[3] if len(line.split(None, 3)) == 4 else line))

    def ls_b(name: str) -> str:  # as ls -b (and docs/s3.md) escape a name
        return name.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")

    expected = [(kind, ls_b(n)) for kind, n in expected]
    assert sorted(got) == expected, done.stderr.decode()


@pytest.mark.parametrize("url_tail", ["", "/"], ids=["no-slash", "slash"])
def test_bucket_with_and_without_slash_are_the_same(
    srv: Server, url_tail: str, tmp_path: Path
) -> None:
    source = srv.new_bucket()
    for key in ["x", "d/y", "d/z/w"]:
        srv.put(source, key, key.encode())
    done = run(
        ["s3", "ls", f"s3://{source}{url_tail}", "--recursive", "--json", "--parallel", "1"],
        env=srv.env,
    )
    assert sorted(json.loads(x)["key"] for x in done.stdout.decode().splitlines()) == [
        "d/y",
        "d/z/w",
        "x",
    ]
    dest = tmp_path / "d"
    down = run(["s3", "cp", f"s3://{source}{url_tail}", str(dest), "-r"], env=srv.env)
    assert down.returncode == 0, down.stderr.decode()
    assert _all_files(dest) == {"x": b"x", "d/y": b"d/y", "d/z/w": b"d/z/w"}
    up_to = srv.new_bucket()
    up = run(["s3", "sync", str(dest), f"s3://{up_to}{url_tail}"], env=srv.env)
    assert up.returncode == 0, up.stderr.decode()
    assert sorted(srv.keys(up_to)) == ["d/y", "d/z/w", "x"]


# -- sync up with --delete from a local tree of odd names -----------------------------------

LOCAL_NAMES = [
    "...",
    ".../x",
    "a\nb",
    "a\\b",
    "a?b",
    "#",
    "a;b=c&d",
    "%2e%2e",
    "a%2Fb",
    NFD,
    NFC + "-2",
    "\u202eevil.txt",
    "a\u200bb",
    "K",
    "k",
    "sub/.hidden",
]


def _make_tree(root: Path, names: list[str]) -> None:
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(name.encode())


@pytest.mark.parametrize("name", LOCAL_NAMES, ids=ids(LOCAL_NAMES))
def test_sync_up_with_delete_keys_are_the_local_names(
    srv: Server, victim: str, name: str, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    _make_tree(src, ["plain", name])
    # Whether the server stores the name at all (moto's router takes no newline
    # in a key: a 404 for boto3's PUT as well): judged against boto3, as below.
    takes = srv.put(srv.new_bucket(), name, b"probe")
    target = srv.new_bucket()
    # Extras the source lacks, some shaped to be confused with the local names.
    extras = ["extra", f"../{victim}/k", "./plain", "plain/", name + "/", name.upper()]
    for extra in extras:
        srv.put(target, extra, b"extra")
    before = srv.snapshot()
    del before[target]
    done = run(["s3", "sync", str(src), f"s3://{target}/", "--delete"], env=srv.env)
    assert done.returncode == (0 if takes else 1), done.stderr.decode()
    after = srv.snapshot()
    del after[target]
    assert after == before, "another bucket changed"
    if not takes:  # the server's refusal, named: the rest is done
        assert b"upload failed: " in done.stderr, done.stderr.decode()
        assert srv.contents(target) == {"plain": b"plain"}, done.stderr.decode()
        return
    assert srv.contents(target) == {"plain": b"plain", name: name.encode()}, done.stderr.decode()
    again = run(["s3", "sync", str(src), f"s3://{target}/", "--delete"], env=srv.env)
    assert again.returncode == 0
    assert b"upload:" not in again.stdout and b"delete:" not in again.stdout, again.stdout


def test_sync_up_follows_a_link_to_an_outside_file_as_aws_does(srv: Server, tmp_path: Path) -> None:
    """A symlink to a file outside the source: the AWS CLI follows it and
    uploads the file's bytes under the link's name; --delete leaves it."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside")
    src = tmp_path / "src"
    src.mkdir()
    (src / "plain").write_bytes(b"plain")
    (src / "link").symlink_to(outside)
    (src / "...").symlink_to("plain")
    target = srv.new_bucket()
    srv.put(target, "gone", b"x")
    done = run(["s3", "sync", str(src), f"s3://{target}", "--delete"], env=srv.env)
    assert done.returncode == 0, done.stderr.decode()
    assert srv.contents(target) == {"plain": b"plain", "link": b"outside", "...": b"plain"}
    assert outside.read_bytes() == b"outside"


# -- sync down with --delete: local extras with odd names; links are removed, not targets ---


@pytest.mark.parametrize("name", LOCAL_NAMES, ids=ids(LOCAL_NAMES))
def test_sync_down_with_delete_removes_only_local_extras(
    srv: Server, name: str, tmp_path: Path
) -> None:
    source = srv.new_bucket()
    srv.put(source, "plain", b"plain")
    kept = {name: b"kept"} if srv.put(source, name, b"kept") else {}  # moto takes no newline
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_bytes(b"not yours")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "extra").write_bytes(b"x")
    (dest / "link-out").symlink_to(outside / "target.txt")
    (dest / "dir-out").symlink_to(outside, target_is_directory=True)
    # a local name differing from the key only by normalisation or case
    other = unicodedata.normalize("NFC", name) if name == NFD else name.swapcase()
    if other != name:
        p = dest / other
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"other spelling")
    done = run(["s3", "sync", f"s3://{source}/", str(dest), "--delete"], env=srv.env)
    assert done.returncode == 0, done.stderr.decode()
    assert _all_files(outside) == {"target.txt": b"not yours"}
    assert not (dest / "link-out").is_symlink()
    assert _all_files(dest) == {"plain": b"plain", **kept}, done.stdout.decode()


# -- sync/cp down of keys that collide as files -------------------------------------------

COLLIDING = [
    ["a", "a/b"],
    ["a/b", "a"],
    ["a", "a/"],
    ["a/", "a/b"],
    ["a", "./a"],
    ["a/b", "a//b"],
    ["a/b", "a/./b"],
    ["x/y", "x/y/z"],
]


@pytest.mark.parametrize("command", ["cp", "sync"])
@pytest.mark.parametrize("keys", COLLIDING, ids=["|".join(k) for k in COLLIDING])
def test_colliding_keys_download_one_file_or_fail_loudly(
    srv: Server, keys: list[str], command: str, tmp_path: Path
) -> None:
    """Two keys that land on one path (or a file where the other needs a
    directory): each written key is whole and its own; any key not written is
    a failure named on stderr (exit 1); nothing outside the destination; and
    never one key's bytes under the other's file."""
    source = srv.new_bucket()
    for k in keys:
        srv.put(source, k, k.encode())
    taken = srv.keys(source)  # what boto3 lists (MinIO takes "a/b" beside "a" but lists only "a")
    dest = tmp_path / "dest"
    args = ["s3", command, f"s3://{source}/", str(dest)]
    if command == "cp":
        args.append("-r")
    done = run(args, env=srv.env)
    files = _all_files(tmp_path)
    assert all(p.startswith("dest/") for p in files), files
    paths = {k: _expected_path(k) for k in taken}
    wanted = {p for p in paths.values() if p is not None}
    written = {p[len("dest/") :]: b for p, b in files.items()}
    for path, body in written.items():
        owners = [k.encode() for k, p in paths.items() if p == path]
        assert body in owners, (path, body)
    missing = wanted - set(written)
    if missing:
        assert done.returncode == 1, done.stderr.decode()
        for path in missing:
            assert any(path.encode() in line for line in done.stderr.splitlines()), (
                done.stderr.decode()
            )
    # two keys on one path: the download is one of them, and a second sync
    # changes nothing more (no flip-flop)
    if command == "sync":
        again = run(args, env=srv.env)
        assert _all_files(dest) == written, again.stdout.decode()


def test_keys_differing_in_case_or_trailing_slash_round_trip(srv: Server, tmp_path: Path) -> None:
    source = srv.new_bucket()
    keys = ["K", "k", "Dir/x", "dir/x", "m", "m/", "n/"]
    for key in keys:
        srv.put(source, key, key.encode())
    dest = tmp_path / "d"
    done = run(["s3", "sync", f"s3://{source}/", str(dest)], env=srv.env)
    assert done.returncode == 0, done.stderr.decode()
    assert _all_files(dest) == {
        "K": b"K",
        "k": b"k",
        "Dir/x": b"Dir/x",
        "dir/x": b"dir/x",
        "m": b"m",
    }
    back = srv.new_bucket()
    up = run(["s3", "sync", str(dest), f"s3://{back}/"], env=srv.env)
    assert up.returncode == 0, up.stderr.decode()
    assert sorted(srv.keys(back)) == ["Dir/x", "K", "dir/x", "k", "m"]
    # --delete from the source again removes nothing and fetches nothing
    again = run(["s3", "sync", f"s3://{source}/", str(dest), "--delete"], env=srv.env)
    assert b"download:" not in again.stdout and b"delete:" not in again.stdout, again.stdout


# -- filters with odd names: aws's fnmatch on the path relative to the prefix ----------------

FILTER_KEYS = [
    "a?b",
    "axb",
    "a[1]",
    "a1",
    "...",
    "..x",
    "a#b",
    "a;b",
    "dir/../f",
    "p/a b",
    NFD,
    NFC,
]
PATTERNS = [
    "a?b",
    "a[1]",
    "a[[]1]",
    "...",
    ".*",
    "*#*",
    "*;*",
    "*/../*",
    "dir/*",
    "p/*",
    NFC,
    "*\u0301",
]


@pytest.mark.parametrize("pattern", PATTERNS, ids=ids(PATTERNS))
def test_include_pattern_takes_what_fnmatch_takes(
    srv: Server, pattern: str, tmp_path: Path
) -> None:
    source = srv.new_bucket()
    taken = [k for k in FILTER_KEYS if srv.put(source, k, k.encode())]
    dest = tmp_path / "d"
    done = run(
        [
            "s3",
            "cp",
            f"s3://{source}/",
            str(dest),
            "-r",
            "--dryrun",
            "--exclude",
            "*",
            "--include",
            pattern,
        ],
        env=srv.env,
    )
    expected = sorted(k for k in taken if fnmatch.fnmatchcase(k, pattern))
    dotted = [k for k in expected if ".." in k.split("/")]  # skipped, a failure (docs)
    assert done.returncode == (1 if dotted else 0), done.stderr.decode()
    expected = [k for k in expected if k not in dotted]
    lines = done.stdout.decode().splitlines()
    got = []
    for line in lines:
        assert line.startswith("(dryrun) download: s3://"), line
        url = line[len("(dryrun) download: ") :].rsplit(" to ", 1)[0]
        got.append(url[len(f"s3://{source}/") :])
    assert sorted(got) == expected, done.stderr.decode()


@pytest.mark.parametrize("pattern", PATTERNS, ids=ids(PATTERNS))
def test_sync_delete_with_exclude_deletes_only_unprotected(
    srv: Server, pattern: str, tmp_path: Path
) -> None:
    """``sync src s3://b --delete --exclude PAT``: keys matching PAT are left
    alone even though the source lacks them."""
    target = srv.new_bucket()
    taken = [k for k in FILTER_KEYS if srv.put(target, k, k.encode())]
    src = tmp_path / "empty"
    src.mkdir()
    done = run(
        ["s3", "sync", str(src), f"s3://{target}/", "--delete", "--exclude", pattern],
        env=srv.env,
    )
    assert done.returncode == 0, done.stderr.decode()
    kept = sorted(k for k in taken if fnmatch.fnmatchcase(k, pattern))
    assert sorted(srv.keys(target)) == kept, done.stdout.decode()
