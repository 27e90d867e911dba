"""Config values that name a secret instead of holding it, read the same way by the broker's
and the controller's config loaders."""

from __future__ import annotations

import os
from collections.abc import Mapping


def resolve_secret_reference(key: str, raw: str, env: Mapping[str, str] | None = None) -> str:
    """A value written ``${file:/path}`` is the file's content (trailing newline dropped);
    ``${env:NAME}`` is that environment variable. Kafka's config providers use the same
    syntax: secrets then stay out of properties files, command lines and process lists."""
    if not (raw.startswith("${") and raw.endswith("}")):
        return raw
    kind, sep, ref = raw[2:-1].partition(":")
    if not sep or kind not in ("file", "env"):
        return raw
    if kind == "env":
        source = os.environ if env is None else env
        if ref not in source:
            raise ValueError(f"config {key}: environment variable {ref} is not set")
        return source[ref]
    try:
        with open(ref) as f:
            return f.read().rstrip("\r\n")
    except OSError as exc:
        # The path is not secret; the content is never echoed.
        raise ValueError(f"config {key}: cannot read {ref}: {exc.strerror or exc}") from None
