"""A free TCP port on the loopback interface, for the servers and engines this package starts on the
user's machine (SGLang's and vLLM's HTTP servers, their engines' distributed init, speculators'
generator server, a Ray head). One function, so every starter binds the same way: 127.0.0.1 only,
never another address."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the time of the call (the kernel's choice for
    port 0). Another process may take it before the caller binds it; starters that retry do so themselves.

    Returns:
        The port number, an ``int`` in 1..65535.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
