"""The standalone reproducer's rank side: the seeding it shares with the pool, its store on the loopback address.

An exported script runs :mod:`fuzzdist.pool.rank.standalone` with torch alone (the scripts themselves are
run in tests/campaign/test_export_script.py).
"""

from __future__ import annotations

import contextlib
import socket

import pytest

from fuzzdist.pool.rank import isolation, standalone


def test_the_ranks_seed_each_example_with_the_standalone_seeding():
    """The pool's ranks call isolation.seed_everything: it is the function exported scripts hold."""
    assert isolation.seed_everything is standalone.seed_everything


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on TCP ``port`` (from /proc/net/tcp and tcp6), in hex."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


_LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1 as /proc/net writes them


def _outward_address() -> str | None:
    """This host's address on its default route, or None where it has none (connecting a UDP socket sends
    nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
        except OSError:
            return None
        address: str = s.getsockname()[0]
    return None if address.startswith("127.") else address


def _reachable(address: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=5):
        return True
    return False


@pytest.fixture
def served():
    """A function that serves a store on a free port with ``make(port)``, and returns the port."""
    stores = []

    def serve(make):
        port = standalone.free_port()
        stores.append(make(port))
        return port

    yield serve
    stores.clear()


def test_a_plain_tcpstore_listens_on_every_interface(served):
    """What the script guards against, seen on this torch: the check below tells a wildcard listener."""
    import datetime

    import torch.distributed as dist

    port = served(lambda port: dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=30)))
    addresses = _listening_addresses(port)
    assert addresses and not addresses <= _LOOPBACK_HEX, addresses


@pytest.mark.parametrize("use_libuv", [True, False], ids=["libuv", "first-server"])
def test_the_scripts_store_listens_on_the_loopback_address_only(served, use_libuv):
    port = served(lambda port: standalone.rendezvous_store(0, 1, port, 30.0, use_libuv=use_libuv))
    assert _listening_addresses(port) == {"0100007F"}
    assert _reachable("127.0.0.1", port)
    outward = _outward_address()
    if outward is not None:
        assert not _reachable(outward, port), f"the store answers on {outward}:{port}"


def test_a_torch_that_cant_bind_the_store_is_said_on_stderr(served, monkeypatch, capsys):
    import torch.distributed as dist

    class OlderTCPStore(dist.TCPStore):
        """A TCPStore without master_listen_fd, as torch's before it."""

        def __init__(self, host_name, port, world_size=None, is_master=False, timeout=None):
            super().__init__(host_name, port, world_size, is_master, timeout=timeout)

    monkeypatch.setattr(dist, "TCPStore", OlderTCPStore)
    port = served(lambda port: standalone.rendezvous_store(0, 1, port, 30.0))
    assert f"listens on every interface (port {port})" in capsys.readouterr().err
    assert not _listening_addresses(port) <= _LOOPBACK_HEX


@pytest.mark.parametrize(
    ("version", "libuv"),
    [
        ("2.13.0+cpu", True),
        ("2.8.0", True),
        ("2.8.1+cu126", True),
        ("2.9.0a0+git1234", True),
        ("2.8.0a0+gitabcd", False),
        ("2.8.0.dev20250301", False),
        ("2.8.0rc1", False),
        ("2.7.1", False),
        ("2.6.0+cpu", False),
        ("1.13.1", False),
        ("unknown", False),
    ],
)
def test_libuv_serves_a_handed_socket_from_the_2_8_release_on(version, libuv):
    assert standalone.libuv_takes_a_socket(version) is libuv
