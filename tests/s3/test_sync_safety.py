"""``surge s3 sync --delete`` deletes only what the source really lacks, and a
download never writes outside its destination: unread directories, symbolic
links to directories and link loops, in both directions (a hostile review's
reproductions, against MinIO and moto)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.s3._buckets import Buckets
from tests.s3.test_cp import new_bucket, tree
from tests.s3.test_sync import sync_cli
from tests.s3.test_upload import stored, write_tree

import surge.s3
from surge.s3.paths import stays_inside, walk_files


def test_walk_follows_directory_links_and_reports_loops(tmp_path: Path) -> None:
    write_tree(tmp_path / "real", {"r.txt": b"r"})
    write_tree(tmp_path / "src", {"a.txt": b"a"})
    os.symlink("../real", tmp_path / "src" / "linked")
    os.symlink(".", tmp_path / "src" / "loop")
    errors: list[tuple[str, str]] = []
    found = [rel for _, rel in walk_files(str(tmp_path / "src"), errors=errors)]
    assert found == ["a.txt", "linked/r.txt"]
    assert [(Path(p).name, "loop" in m) for p, m in errors] == [("loop", True)]
    # Not following: the link is neither entered nor yielded.
    assert [rel for _, rel in walk_files(str(tmp_path / "src"), follow_links=False)] == ["a.txt"]


def test_stays_inside(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink("../outside", tmp_path / "dest" / "sub")
    dest = str(tmp_path / "dest")
    assert stays_inside(dest, f"{dest}/a/b/c.txt")  # not there yet: made inside
    assert not stays_inside(dest, f"{dest}/sub/x.txt")
    assert not stays_inside(dest, f"{dest}/sub/new/x.txt")


def test_a_directory_link_in_the_source_is_uploaded_not_deleted(
    server: Buckets, tmp_path: Path
) -> None:
    write_tree(tmp_path / "real", {"r.txt": b"r"})
    write_tree(tmp_path / "up", {"a.txt": b"a"})
    os.symlink("../real", tmp_path / "up" / "linked")
    bucket = new_bucket(server, {"h/linked/r.txt": b"r", "h/gone.txt": b"g"})
    code, stdout, err = sync_cli(server, str(tmp_path / "up"), f"s3://{bucket}/h/", "--delete")
    assert code == 0, err
    assert stored(server, bucket) == {"h/a.txt": b"a", "h/linked/r.txt": b"r"}
    assert "delete: s3://" in stdout and "h/gone.txt" in stdout


def test_an_unread_part_of_the_source_deletes_nothing(server: Buckets, tmp_path: Path) -> None:
    """A link loop cannot be walked: the run fails (exit 1, a line naming it)
    and --delete removes nothing, not even what it could have judged."""
    write_tree(tmp_path / "up", {"a.txt": b"a"})
    os.symlink(".", tmp_path / "up" / "loop")
    objects = {"e/a.txt": b"a", "e/loop/x.txt": b"x", "e/gone.txt": b"g"}
    bucket = new_bucket(server, objects)
    code, stdout, err = sync_cli(server, str(tmp_path / "up"), f"s3://{bucket}/e/", "--delete")
    assert code == 1
    assert "loop" in err and "not deleting anything" in err
    assert "delete:" not in stdout
    assert stored(server, bucket) == objects
    summary = surge.s3.sync(
        str(tmp_path / "up"), f"s3://{bucket}/e/", delete=True, **server.options()
    )
    assert summary.deleted == 0
    assert {f.code for f in summary.failures} == {"LocalError", "IncompleteSource"}


def test_a_download_never_writes_through_a_link_out_of_the_destination(
    server: Buckets, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    write_tree(outside, {"x.txt": b"precious"})
    down = tmp_path / "down"
    down.mkdir()
    os.symlink("../outside", down / "sub")
    bucket = new_bucket(server, {"sub/x.txt": b"new", "a.txt": b"a"})
    code, _, err = sync_cli(server, f"s3://{bucket}/", str(down), "--delete")
    assert code == 1
    assert "outside the destination" in err
    assert (outside / "x.txt").read_bytes() == b"precious"
    assert os.path.islink(down / "sub")  # not deleted either: its target is not ours
    assert tree(down) == {"a.txt": b"a"}  # (the walk does not enter the link)


def test_sync_down_judges_age_as_the_aws_cli(server: Buckets, tmp_path: Path) -> None:
    """Same size: a file older than its object (uploaded from here, its mtime
    kept) is left alone; one newer (edited since the last sync) is fetched
    again, as `aws s3 sync` does."""
    down = tmp_path / "down"
    write_tree(down, {"old.txt": b"same", "edited.txt": b"mine"})
    bucket = new_bucket(server, {"old.txt": b"same", "edited.txt": b"orig"})
    os.utime(down / "old.txt", (1_600_000_000, 1_600_000_000))  # 2020: older than the object
    os.utime(down / "edited.txt", (4_000_000_000, 4_000_000_000))  # newer than the object
    summary = surge.s3.sync(f"s3://{bucket}/", str(down), **server.options())
    assert (summary.objects, summary.unchanged) == (1, 1)
    assert tree(down) == {"old.txt": b"same", "edited.txt": b"orig"}
    assert int(os.stat(down / "old.txt").st_mtime) == 1_600_000_000


def test_sync_of_a_missing_directory_says_so_in_syncs_terms(
    server: Buckets, tmp_path: Path
) -> None:
    bucket = new_bucket(server, {})
    code, _, err = sync_cli(server, str(tmp_path / "nowhere"), f"s3://{bucket}/")
    assert code == 2
    assert "is not a directory (sync uploads a directory)" in err and "--recursive" not in err
