"""A launch's port (resources/hosts/host_side.py free_port): a port another launch on the host took
between the kernel's pick and the preflight is passed over, not reported as the host's problem."""

from __future__ import annotations

import socket

from hyperloom_assets.resources.hosts import host_side


def test_a_port_taken_since_the_kernel_picked_it_is_passed_over(monkeypatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((host_side.SERVE_HOST, 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy, busy, 0])

        def pick(host: str) -> int:  # the kernel's picks: twice the port another launch has bound since
            port = next(picks)
            if port:
                return port
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind((host, 0))
                return probe.getsockname()[1]

        monkeypatch.setattr(host_side, "allocate_port", pick)
        port = host_side.free_port()
        assert port != busy and host_side.port_free(port, host_side.SERVE_HOST)
        assert host_side.preflight_problems(port, check_foreign_processes=False) == []
