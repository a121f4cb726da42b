"""Exceptions with messages that name the offending file, row or key."""


class MemauditError(Exception):
    """Base class for user-facing errors (bad input, missing assets, bad config)."""


class ConfigError(MemauditError):
    """The configuration is invalid; the message names the key."""


class InputError(MemauditError):
    """An input file is malformed; the message names the file and line/row."""


class PromptTooLongError(InputError, ValueError):
    """A prompt (with its new tokens) longer than a model's positions: never cut silently. A user's error, one
    line from a job; a ValueError too, which ``memaudit serve`` answers with HTTP 400 (no retry)."""


class AssetError(MemauditError):
    """A demo asset (Debian or PyPI package) is missing or unreadable."""


class StorageError(MemauditError):
    """A file could not be written: disk full, quota, permission, a read-only file system, or a path that cannot
    be one (a directory, a file where a folder of the path would be).

    The message names the path, the cause in plain words and what to do; the
    half-written temporary file has already been removed.
    """


class JobInterrupted(MemauditError):
    """A job stopped by SIGTERM/SIGINT (a training job saves a checkpoint first); rerunning resumes it."""
