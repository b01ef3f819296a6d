"""JSON over HTTP for the accept run: one timeout per request, no retries, errors in the server's words.

A retry would hide exactly what the run must report (a server that drops a request under load), so
every failure is final: :class:`ServerError` names the request (method, URL, and the prompt when the
caller gives one) and what came back (HTTP status and the start of the body, or the connection
error). Standard library only.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any, Optional

from eagle3_conformance.core.errors import DataError

BODY_CHARS = 300
"""Characters of an error response's body quoted in the message."""


class ServerError(DataError):
    """The server could not be reached, answered an error, dropped the connection, or answered
    something that is not what its API documents (exit 2 on the command line).

    Attributes:
        status: the HTTP status of an error answer (>= 400); None when no answer came.
        words: the server's words in that answer (its error message, or the start of the body)."""

    def __init__(self, message: str, status: Optional[int] = None, words: str = "") -> None:
        super().__init__(message)
        self.status, self.words = status, words


class Unreachable(ServerError):
    """Nothing answered: the connection was refused, or no answer came within the timeout."""


def _words(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace")
    try:  # SGLang / vLLM / FastAPI error bodies: {"error": {"message": ...}} or {"detail": ...}
        doc = json.loads(text)
        if isinstance(doc, dict):
            err = doc.get("error")
            msg = err.get("message") if isinstance(err, dict) else err or doc.get("detail") or doc.get("message")
            if msg:
                text = str(msg)
    except ValueError:
        pass
    return " ".join(text.split())[:BODY_CHARS]


def request(method: str, url: str, body: Optional[dict] = None, *, timeout: float, what: str = "",
            parse: bool = True) -> Any:
    """``method url`` with an optional JSON body; the decoded JSON answer (or the text with ``parse=False``).

    Args:
        timeout: seconds for the whole request (connect and read), > 0.
        what: the request in words for messages (e.g. ``"prompt chat-03"``).

    Raises:
        ServerError: connection refused/reset/closed, timeout, HTTP status >= 400, or a body that is
            not JSON (``parse=True``); the message names ``what``, the URL and the server's words.
    """
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data is not None else {})
    who = f"{what}: " if what else ""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
    except urllib.error.HTTPError as e:
        words = _words(e.read() or b"") or str(e.reason)
        raise ServerError(f"{who}{method} {url} answered HTTP {e.code}: {words}", e.code, words) from None
    except (socket.timeout, TimeoutError):
        raise Unreachable(f"{who}{method} {url}: no answer within {timeout:g} s") from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise Unreachable(f"{who}{method} {url}: no answer within {timeout:g} s") from None
        raise Unreachable(f"{who}{method} {url}: cannot connect ({reason})") from None
    except (ConnectionError, OSError, ValueError) as e:  # reset / closed mid-answer (http.client errors included)
        raise ServerError(f"{who}{method} {url}: the connection was dropped ({type(e).__name__}: {e})") from None
    if not parse:
        return raw.decode("utf-8", errors="replace")
    try:
        return json.loads(raw)
    except ValueError:
        raise ServerError(f"{who}{method} {url}: the answer is not JSON: {_words(raw)!r}") from None
