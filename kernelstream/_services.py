"""Local helper processes that listen on a port: Beam's job service, a test Kafka broker."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(argv: Callable[[int], list[str]], what: str, host: str = "127.0.0.1",
          timeout: float = 30.0) -> Iterator[int]:
    """Start ``argv(port)`` on a free port, wait until it accepts connections on
    ``host:port``, yield the port, and stop the process (this one only) on exit. A process
    that exits or never listens raises, with its stderr."""
    port = free_port(host)
    proc = subprocess.Popen(argv(port), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"{what} exited ({proc.returncode}): {err}")
            with contextlib.suppress(OSError), socket.create_connection((host, port), 1):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not listen on port {port}")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
