"""API keys: held so that they never show, and redacted from every message and log record.

A key is read from the environment variable the config names and held in a
:class:`Secret` whose ``repr`` hides it, and registered for redaction: every
error message the API backends build (:func:`redact`) and every log record in
the process (a log record factory) has the key's text replaced by ``***``.
Keys travel only in HTTP headers, so neither the cache nor the ledger ever
holds one.
"""

from __future__ import annotations

import logging
import os
import re
import threading

from memaudit.errors import ConfigError
from memaudit.secrets import redact as redact_credentials

_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
# Provider keys and the partial echoes some error messages contain ("sk-proj-abc***wxyz").
_KEY_PATTERN = re.compile(r"\bsk-[A-Za-z0-9_\-*.]{4,}")
_factory_installed = False


class Secret:
    """An API key: ``repr``/``str`` never show it; ``.value`` is for the SDK client only."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    @property
    def value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


def register_secret(value: str) -> None:
    """Redact ``value`` from every error message built here and every log record from now on."""
    if len(value) < 8:  # too short to be a real key; redacting it would mangle ordinary text
        return
    with _SECRETS_LOCK:
        _SECRETS.add(value)
    _install_log_redaction()


def redact(text: str) -> str:
    """``text`` with registered keys, key-shaped tokens and URL credentials replaced by ``***``.

    Key-shaped: OpenAI/Anthropic ``sk-`` keys with the partial echoes their errors contain, and
    every other format the config check knows (:func:`memaudit.secrets.redact`: Hugging Face
    ``hf_``, GitHub, AWS, Slack, Google keys, JWTs, PEM private keys, ``Bearer`` and ``Basic``
    credentials, a credential header's value, a URL's credential query parameters and userinfo), so
    a key quoted by an SDK or a server shows in no message or log record even if it was never
    registered.
    """
    for secret in sorted(_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "***")
    text = _KEY_PATTERN.sub("sk-***", text)
    return redact_credentials(text, "***")


def _install_log_redaction() -> None:
    """Redact keys from every log record of the process, whichever logger or handler emits it.

    A record factory (rather than a filter) because a filter sees only records of
    the logger or handler it is attached to, and the SDKs, httpx and Snakemake
    log through their own.
    """
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed log call; the logging module reports it later
            return record
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[1] is not None:
            import traceback

            record.exc_text = redact("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True


def read_api_key(env_name: str, *, label: str) -> Secret:
    # Keys pasted from a file often carry a trailing newline, which no HTTP header may hold.
    value = os.environ.get(env_name, "").strip()
    if not value:
        raise ConfigError(f"{label}: environment variable {env_name} is not set; export the API key in it "
                          f"(the config names the variable, never the key)")
    if any(not 33 <= ord(c) <= 126 for c in value):
        # No HTTP header may carry it: httpx stopped the job with a traceback (a non-ASCII character)
        # or quoted the header, key and all, in a log record (a line break between two pasted keys).
        raise ConfigError(f"{label}: environment variable {env_name} holds a space, line break or non-ASCII "
                          f"character inside the key (two keys pasted, a typographic quote?); the value is "
                          f"not shown")
    register_secret(value)
    return Secret(value)
