"""Under torchrun, nothing fuzzdist unpickles from torchrun's store is read unless signed with the run's secret.

The store listens on every interface and anyone who reaches it can write: these tests play that someone,
with a real TCPStore, and show a forged value refused with a clear error, never unpickled (the forged
pickles below would create a file if they were).
"""

from __future__ import annotations

import os
import pickle
import stat
import types

import pytest
import torch.distributed as dist

from fuzzdist.errors import ForgedMessage, InvalidState
from fuzzdist.pool import messages, torchrun, torchrun_auth
from fuzzdist.pool.torchrun_auth import Signer

SECRET = b"0123456789abcdef0123456789abcdef"


class _Touch:
    """Unpickling this creates ``path``: what an attacker's pickle would do, harmless."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _forged(path) -> bytes:
    return pickle.dumps(
        (
            "run",
            {"seq": 1, "seed": 0, "payload": pickle.dumps(_Touch(str(path))), "sys_path": None, "x": _Touch(str(path))},
        )
    )


@pytest.fixture
def store(monkeypatch):
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(master.port))
    for name in ("_signer", "_PREFIX", "_STOP_KEY"):  # put back after the test
        monkeypatch.setattr(torchrun, name, getattr(torchrun, name))
    torchrun.use_signer(Signer(SECRET, "run/0"))
    return master


def _attacker():
    """Another client of the store, as anyone on the network can be."""
    return dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), is_master=False, wait_for_workers=False)


class _Heart:
    def rank0_lost(self) -> bool:
        return False


def test_a_signed_value_opens_and_any_change_is_refused():
    signer = Signer(SECRET, "run/0")
    sealed = signer.seal("k", b"data")
    assert signer.open("k", sealed) == b"data"
    for key, value in [
        ("k", sealed[:-1] + b"X"),
        ("other", sealed),
        ("k", b"short"),
        ("k", b"data"),
        ("k", Signer(b"another secret, 16+ bytes", "run/0").seal("k", b"data")),
        ("k", Signer(SECRET, "run/1").seal("k", b"data")),
    ]:  # the next attempt's
        with pytest.raises(ForgedMessage, match="not signed with this run's secret"):
            signer.open(key, value)


def test_the_key_prefix_is_not_guessable_without_the_secret():
    prefix = Signer(SECRET, "none/0").prefix
    assert prefix.startswith("fuzzdist/") and "none" not in prefix
    assert prefix != Signer(b"another secret, 16+ bytes", "none/0").prefix
    assert prefix != Signer(SECRET, "none/1").prefix  # a restart gets a fresh namespace


def test_a_forged_call_is_refused_not_executed(store, tmp_path):
    """The serving rank's read of a call: someone who even knows the prefix writes a pickle there."""
    touched = tmp_path / "executed"
    _attacker().set(f"{torchrun._PREFIX}call/1", _forged(touched))
    channel = torchrun._StoreChannel(dist.TCPStore("127.0.0.1", store.port, is_master=False), 1, _Heart())
    with pytest.raises(ForgedMessage, match=r"refused the value of '.*call/1' in torchrun's store"):
        channel.receive()
    assert not touched.exists()


def test_a_forged_stop_is_refused_and_serve_says_so_in_one_line(store, tmp_path, capsys, monkeypatch):
    touched = tmp_path / "executed"
    _attacker().set(torchrun._STOP_KEY, _forged(touched))
    monkeypatch.setattr(
        torchrun,
        "_Heartbeat",
        lambda *a, **k: types.SimpleNamespace(start=lambda: None, stop=lambda: None, rank0_lost=lambda: False),
    )
    ctx = types.SimpleNamespace(rank=1)
    client = dist.TCPStore("127.0.0.1", store.port, is_master=False)
    assert torchrun.serve(ctx, client) == torchrun.FORGED_EXIT_CODE
    err = capsys.readouterr().err
    assert err.startswith("fuzzdist rank 1: refused the value of") and err.count("\n") == 1, err
    assert "FUZZDIST_TORCHRUN_SECRET" in err
    assert not touched.exists()


def test_a_signed_call_is_served(store):
    key = f"{torchrun._PREFIX}call/1"
    store.set(key, torchrun._seal(key, messages.stop()))
    channel = torchrun._StoreChannel(dist.TCPStore("127.0.0.1", store.port, is_master=False), 1, _Heart())
    assert channel.receive() == ("stop", {})


def test_a_forged_snapshot_request_is_refused_and_the_heartbeat_goes_on(store, tmp_path, capsys):
    touched = tmp_path / "executed"
    heart = torchrun._Heartbeat(1, watch_rank0=True)
    heart.start()
    try:
        _attacker().set(f"{torchrun._PREFIX}snapshot", _forged(touched))
        beats = store.add(torchrun._alive_key(1), 0)
        deadline = torchrun.time.monotonic() + 10
        while store.add(torchrun._alive_key(1), 0) < beats + 3 and torchrun.time.monotonic() < deadline:
            torchrun.time.sleep(0.1)
        assert store.add(torchrun._alive_key(1), 0) >= beats + 3  # still beating
    finally:
        heart.stop()
    assert not touched.exists()
    assert "refused the value of" in capsys.readouterr().err


def test_a_forged_reply_fails_the_example_with_the_reason_unread(store, tmp_path):
    touched = tmp_path / "executed"
    reply = torchrun._reply("k", _forged(touched), 7)
    name, fields = messages.load(reply)
    assert name == "err" and fields["seq"] == 7
    assert "not signed with this run's secret" in fields["error"].message
    assert not touched.exists()


# -- the secret ----------------------------------------------------------------------------


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in (torchrun_auth.SECRET_ENV, torchrun_auth.SECRET_FILE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(torchrun_auth.tempfile, "tempdir", None)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    return monkeypatch


def test_several_nodes_without_a_secret_is_a_clear_error(env):
    env.setenv("WORLD_SIZE", "4")
    env.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(InvalidState, match="several nodes.*set FUZZDIST_TORCHRUN_SECRET to the same"):
        torchrun_auth.load_secret()


def test_a_secret_from_the_environment_or_a_private_file(env, tmp_path):
    env.setenv("FUZZDIST_TORCHRUN_SECRET", "short")
    with pytest.raises(InvalidState, match="5 characters long"):
        torchrun_auth.load_secret()
    env.setenv("FUZZDIST_TORCHRUN_SECRET", "x" * 20)
    assert torchrun_auth.load_secret() == b"x" * 20
    env.delenv("FUZZDIST_TORCHRUN_SECRET")
    secret = tmp_path / "secret"
    secret.write_bytes(b"y" * 32 + b"\n")
    secret.chmod(0o644)
    env.setenv("FUZZDIST_TORCHRUN_SECRET_FILE", str(secret))
    with pytest.raises(InvalidState, match="nobody else can read or write"):
        torchrun_auth.load_secret()
    secret.chmod(0o600)
    assert torchrun_auth.load_secret() == b"y" * 32
    link = tmp_path / "link"
    link.symlink_to(secret)
    env.setenv("FUZZDIST_TORCHRUN_SECRET_FILE", str(link))
    with pytest.raises(InvalidState, match="not a link"):
        torchrun_auth.load_secret()


def test_one_node_makes_its_secret_shared_by_the_ranks_then_forgets_it(env, tmp_path):
    env.setenv("WORLD_SIZE", "2")
    env.setenv("LOCAL_WORLD_SIZE", "2")
    first = torchrun_auth.load_secret()
    assert torchrun_auth.load_secret() == first and len(first) == 32  # the second rank reads the first's
    folder = tmp_path / f"fuzzdist-{os.getuid()}"
    [key] = folder.iterdir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(key.stat().st_mode) == 0o600
    torchrun_auth.forget_node_secret()
    assert not folder.exists()  # nothing left behind
    torchrun_auth.forget_node_secret()  # the other ranks forget it too: the folder is not made again
    assert not folder.exists()
    env.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert torchrun_auth.load_secret() != first  # the next attempt makes its own
    torchrun_auth.forget_node_secret()


def test_a_private_folder_open_to_others_is_refused(env, tmp_path):
    env.setenv("WORLD_SIZE", "2")
    env.setenv("LOCAL_WORLD_SIZE", "2")
    folder = tmp_path / f"fuzzdist-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    with pytest.raises(InvalidState, match="not a folder only you can open"):
        torchrun_auth.load_secret()
    folder.rmdir()
    folder.symlink_to(tmp_path)
    with pytest.raises(InvalidState, match="not a folder only you can open"):
        torchrun_auth.load_secret()


def test_fuzzdist_run_on_several_nodes_without_a_secret_is_one_line_and_exit_2(env, tmp_path, capsys):
    from fuzzdist.cli import main

    (tmp_path / "properties").mkdir()
    (tmp_path / "properties" / "test_p.py").write_text(
        "from hypothesis import given, strategies as st\n\n@given(st.integers())\ndef test_p(n):\n    pass\n"
    )
    env.chdir(tmp_path)
    for name, value in dict(
        RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="1"
    ).items():
        env.setenv(name, value)
    assert main(["run", "--max-examples", "1", "--report", "", "--junit", "", "--progress", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "several nodes" in err and "FUZZDIST_TORCHRUN_SECRET" in err, err


def test_ranks_of_one_job_share_the_one_node_secret_whatever_their_parent(env, monkeypatch):
    """A wrapper script that does not exec is each rank's parent: the ranks still find one secret file."""
    for name, value in dict(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29511").items():
        env.setenv(name, value)
    monkeypatch.setattr(torchrun_auth.os, "getppid", lambda: 1000)
    first = torchrun_auth.load_secret()
    monkeypatch.setattr(torchrun_auth.os, "getppid", lambda: 1001)
    assert torchrun_auth.load_secret() == first
    env.setenv("MASTER_PORT", "29512")  # another job beside it: its own secret
    assert torchrun_auth.load_secret() != first
    torchrun_auth.forget_node_secret()
    env.setenv("MASTER_PORT", "29511")
    torchrun_auth.forget_node_secret()


def _show(store, rank, secret):
    """Put ``rank``'s fingerprint in the store, as that rank's check does first."""
    scope = torchrun_auth.scope()
    store.set(torchrun_auth.fingerprint_key(scope, rank), torchrun_auth.fingerprint(secret, scope))


def _check(store, rank, world_size, secret, timeout=10.0):
    client = dist.TCPStore("127.0.0.1", store.port, is_master=False, wait_for_workers=False)
    torchrun_auth.check_same_secret(client, rank, world_size, secret, timeout)


def test_one_secret_on_every_rank_passes_the_check(store, env):
    env.setenv("FUZZDIST_TORCHRUN_SECRET", SECRET.decode())
    _show(store, 0, SECRET)  # rank 0's, first
    for rank in (1, 2, 0):  # ranks 1 and 2 compare with rank 0's, rank 0 with theirs
        _check(store, rank, 3, SECRET)


def test_a_rank_with_another_secret_is_refused_on_both_sides_naming_the_secret(store, env):
    env.setenv("FUZZDIST_TORCHRUN_SECRET", SECRET.decode())
    _show(store, 0, SECRET)
    with pytest.raises(
        InvalidState,
        match=r"^rank 1's secret is not rank 0's \(FUZZDIST_TORCHRUN_SECRET\).*"
        r"nothing was run.*set FUZZDIST_TORCHRUN_SECRET to the same",
    ):
        _check(store, 1, 2, b"another secret, 16 characters or more")
    with pytest.raises(InvalidState, match=r"^rank\(s\) 1 have another secret than rank 0's"):
        _check(store, 0, 2, SECRET)


def test_a_fingerprint_tells_nothing_but_sameness(store):
    assert torchrun_auth.fingerprint(SECRET, "a/0") == torchrun_auth.fingerprint(SECRET, "a/0")
    assert torchrun_auth.fingerprint(SECRET, "a/0") != torchrun_auth.fingerprint(SECRET + b"x", "a/0")
    assert SECRET not in torchrun_auth.fingerprint(SECRET, "a/0")


def test_a_rank_that_shows_no_secret_is_named_after_the_timeout(store, env):
    env.setenv("FUZZDIST_TORCHRUN_SECRET", SECRET.decode())
    with pytest.raises(InvalidState, match=r"^rank\(s\) 2 did not show which secret"):
        _show(store, 1, SECRET)
        _check(store, 0, 3, SECRET, timeout=1.0)
