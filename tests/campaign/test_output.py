"""The one writer of fuzzdist's outputs: nothing planted in the folder is written through, devices stay devices."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from fuzzdist.campaign.output import check_output, same_output, write_output


def test_a_new_file_gets_the_mode_a_plain_open_gives_and_no_temporary_is_left(tmp_path):
    old = os.umask(0o027)
    try:
        write_output(tmp_path / "r.json", "{}")
        (tmp_path / "plain").write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    assert (tmp_path / "r.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "r.json"]


def test_a_rewrite_keeps_the_file_s_mode(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o640)
    write_output(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640


def test_links_planted_at_every_name_the_old_writers_used_are_never_written_through(tmp_path, monkeypatch):
    """Another user plants links in a shared folder at the temporary names (the old JUnit writer's
    ``.NAME.PID.tmp``, mkstemp's) and at the target itself: the victim file stays untouched."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "shared"
    out.mkdir()
    (out / f".junit.xml.{os.getpid()}.tmp").symlink_to(victim)
    (out / "report.json").symlink_to(victim)
    names = iter(["aaaa", "aaaa", "bbbb"])  # the first random name is taken by a planted link
    (out / ".report.json.aaaa.tmp").symlink_to(victim)
    monkeypatch.setattr("fuzzdist.campaign.output.secrets.token_hex", lambda n: next(names))
    write_output(out / "report.json", "{}")
    assert victim.read_text() == "precious"
    assert not (out / "report.json").is_symlink() and (out / "report.json").read_text() == "{}"


def test_a_device_is_written_to_not_replaced(monkeypatch):
    """``--html /dev/null`` as root replaced /dev/null with a regular file (a rename over it)."""

    def no_rename(*args):  # the check must not break this machine's /dev/null if the writer regresses
        raise AssertionError(f"os.replace{args}")

    monkeypatch.setattr(os, "replace", no_rename)
    write_output("/dev/null", "x" * 100_000)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_fifo_is_written_to_and_one_nobody_reads_is_an_error_not_a_wait(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        write_output(fifo, "x")
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    for _ in range(200):  # the reader's open must come first
        try:
            write_output(fifo, "hello")
            break
        except OSError:
            threading.Event().wait(0.01)
    reader.join(10)
    assert got == ["hello"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_folder_or_missing_folder_is_refused_up_front(tmp_path):
    assert check_output(tmp_path) == "it is a folder: name a file in it"
    assert check_output(tmp_path / "no" / "x.json") == f"the folder {tmp_path / 'no'} does not exist"
    assert check_output(tmp_path / "x.json") is None and list(tmp_path.iterdir()) == []
    assert check_output("/dev/null") is None
    with pytest.raises(IsADirectoryError):
        write_output(tmp_path, "x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_folder_is_refused_up_front(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert check_output(folder / "x.json") == "Permission denied"
    finally:
        folder.chmod(0o700)


def test_same_output_sees_through_folder_links_and_relative_paths(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d")
    monkeypatch.chdir(tmp_path)
    assert same_output("d/x.html", tmp_path / "link" / "x.html")
    assert same_output("x.json", "./x.json")
    assert not same_output("x.json", "x.html")


def test_the_writer_never_touches_the_process_umask(tmp_path, monkeypatch):
    """Setting the umask to read it (as the old writer did) left it 0 for a moment, for every other thread."""

    def umask(mask):
        raise AssertionError("os.umask called")

    monkeypatch.setattr(os, "umask", umask)
    write_output(tmp_path / "r.json", "{}")
    from fuzzdist.campaign.report import write_json_atomic

    write_json_atomic(tmp_path / "r2.json", {})


@pytest.mark.parametrize("length", [233, 240, 255])
def test_a_name_as_long_as_the_file_system_takes_is_written(tmp_path, length):
    """The temporary name adds 22 characters to the output's: cut short, it stays within NAME_MAX."""
    name = "r" * (length - len(".json")) + ".json"
    assert check_output(tmp_path / name) is None
    write_output(tmp_path / name, "{}")
    assert (tmp_path / name).read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_long_name_in_several_bytes_per_character_is_cut_by_bytes(tmp_path):
    name = "é" * 120 + ".json"  # 245 bytes in UTF-8: the temporary name's cut counts bytes, not characters
    write_output(tmp_path / name, "{}")
    assert [p.name for p in tmp_path.iterdir()] == [name]
