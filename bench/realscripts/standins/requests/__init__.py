"""Stand-in for requests: ``get`` serves the files the bench prepared in ``STANDIN_DOWNLOADS`` (by the
URL's last path segment) and refuses every other URL; it never uses the network."""

from __future__ import annotations

import io
import os
import posixpath
from urllib.parse import urlparse


class ConnectionError(OSError):  # noqa: A001 - requests' name
    pass


class Response:
    def __init__(self, payload: bytes, url: str):
        self.raw = io.BytesIO(payload)
        self.content, self.url, self.status_code = payload, url, 200

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.close()
        return False

    def raise_for_status(self):
        return None


def prepared_file(url: str) -> str:
    name = posixpath.basename(urlparse(url).path)
    path = os.path.join(os.environ.get("STANDIN_DOWNLOADS", ""), name)
    if not name or not os.path.isfile(path):
        raise ConnectionError(f"offline stand-in: no prepared file for {url}")
    return path


def get(url, stream=False, **kwargs):
    with open(prepared_file(url), "rb") as fh:
        return Response(fh.read(), url)
