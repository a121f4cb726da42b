"""Retries with exponential backoff and jitter, honouring Retry-After; a cooldown shared by threads.

A request that fails with a *transient* fault (HTTP 429, 408, 409, 5xx, a connection
error, a timeout, a body that is not JSON) is retried up to ``max_attempts`` times
in all. Between attempts the caller waits

- what the server asked for (``Retry-After`` / ``retry-after-ms``) when it named a wait above 0, or
- ``d/2 + U(0, d/2)`` with ``d = min(max_delay, base_delay * 2**(attempt-1))``
  ("equal jitter": the wait grows exponentially, and concurrent clients that
  failed together do not retry in lockstep).

A 429 means the whole account is over its limit, not just this request, so it
also pauses every other thread of the backend (:class:`Cooldown`) for the same
time instead of letting them hammer the API. Other faults (400, 401, 403, 404,
422) are permanent: retrying cannot help, so they fail at once. A server's
``x-should-retry: true`` or ``false`` decides over the status, as in the SDKs' own
retries (a proxy that has spent its own retries answers ``false``).

A ``stop`` event (set when the batch is interrupted: Ctrl-C, SLURM's SIGTERM) ends the
waits at once and sends no further attempt: a request waiting for its retry is not in
flight, and retrying it after the interrupt paid for an answer nobody reads while the
job's exit waited out the backoff.
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, TypeVar

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))


class RequestFault(Exception):
    """One failed attempt, classified; ``message`` is already redacted.

    ``every_request``: a fault every request of the batch would meet alike (a key refused, a model the
    account cannot use, a spent quota), after which the backend sends no more of the batch;
    ``connection``: the server could not be reached at all.
    """

    def __init__(self, message: str, *, retryable: bool, status: int | None = None,
                 retry_after: float | None = None, why_not_retried: str = "the request itself was rejected",
                 every_request: bool = False, connection: bool = False):
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.why_not_retried = why_not_retried
        self.every_request = every_request
        self.connection = connection


class RetriesStopped(Exception):
    """The batch was interrupted before this request's next attempt: nothing more was sent."""

    def __init__(self, attempts: int):
        self.attempts = attempts
        super().__init__(f"not sent again: the run was interrupted after {attempts} attempt"
                         f"{'s' if attempts != 1 else ''}")


class RetriesExhausted(Exception):
    """The final fault of a request, with the number of attempts made."""

    def __init__(self, fault: RequestFault, attempts: int, *, reason: str = ""):
        self.fault = fault
        self.attempts = attempts
        what = f"after {attempts} attempt{'s' if attempts != 1 else ''}" if fault.retryable else \
            f"(not retried: {fault.why_not_retried})"
        super().__init__(f"{fault.message} {what}{reason}")


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first try: ``max_retries`` in the config plus one."""

    max_attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    # A server asking for a longer wait than this is out of quota for the day, not
    # briefly busy: fail with a clear message rather than sleep for an hour.
    max_retry_after: float = 300.0

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Wait after failed attempt number ``attempt`` (1-based) when the server named none."""
        d = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return d / 2 + rng.uniform(0, d / 2)


def should_retry_header(headers: Mapping[str, str] | None) -> bool | None:
    """The server's ``x-should-retry``: ``True``/``False`` where it says ``true``/``false``, else ``None``."""
    value = {str(k).lower(): str(v) for k, v in (headers or {}).items()}.get("x-should-retry", "")
    return {"true": True, "false": False}.get(value.strip().lower())


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` is either delta-seconds (fractions accepted, as OpenAI sends
    them) or an HTTP date (RFC 9110 section 10.2.3). ``None`` when absent or unreadable.
    """
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in lower:
        try:
            return max(0.0, float(lower["retry-after-ms"]) / 1000.0)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Cooldown:
    """A moment before which no thread of one backend may send: set by 429 responses."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self._until = 0.0
        self._lock = threading.Lock()
        self._clock, self._sleep = clock, sleep

    def pause(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, self._clock() + seconds)

    def wait(self, stop: threading.Event | None = None) -> float:
        """Sleep until the cooldown is over, or ``stop`` is set; returns the seconds slept."""
        slept = 0.0
        while True:
            with self._lock:
                left = self._until - self._clock()
            if left <= 0 or (stop is not None and stop.is_set()):
                return slept
            if stop is not None:
                stop.wait(left)
            else:
                self._sleep(left)
            slept += left


def call_with_retries(attempt: Callable[[], T], policy: RetryPolicy, *, cooldown: Cooldown | None = None,
                      rng: random.Random | None = None, sleep: Callable[[float], None] = time.sleep,
                      on_retry: Callable[[RequestFault, int, float], None] | None = None,
                      stop: threading.Event | None = None) -> tuple[T, int]:
    """Run ``attempt`` until it returns, retrying transient :class:`RequestFault` s.

    Returns ``(value, attempts)``; raises :class:`RetriesExhausted` with the last
    fault when attempts run out, the fault is permanent, or the server asks for a
    wait longer than ``policy.max_retry_after``. ``on_retry(fault, attempt, delay)``
    is called before each wait (for logging and counting). Once ``stop`` is set, the
    waits end and :class:`RetriesStopped` is raised instead of another attempt.
    """
    rng = rng or random.Random()
    if stop is not None:
        sleep = stop.wait
    n = 0
    while True:
        n += 1
        if cooldown is not None:
            cooldown.wait(stop)
        if stop is not None and stop.is_set():
            raise RetriesStopped(n - 1)
        try:
            return attempt(), n
        except RequestFault as fault:
            if not fault.retryable:
                raise RetriesExhausted(fault, n) from None
            if fault.retry_after is not None and fault.retry_after > policy.max_retry_after:
                raise RetriesExhausted(fault, n, reason=(
                    f"; the server asks to wait {fault.retry_after:.0f}s, more than max_retry_after "
                    f"({policy.max_retry_after:.0f}s): the quota is probably exhausted")) from None
            if n >= policy.max_attempts:
                raise RetriesExhausted(fault, n) from None
            # a wait of 0 (Retry-After: 0, a date already past) names none, as the SDKs read it
            named = fault.retry_after is not None and fault.retry_after > 0
            delay = fault.retry_after if named else policy.backoff(n, rng)
            if fault.status == 429 and cooldown is not None:
                cooldown.pause(delay)
            if on_retry is not None:
                on_retry(fault, n, delay)
            sleep(delay)
