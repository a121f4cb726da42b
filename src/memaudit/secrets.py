"""Telling credentials apart from config values, so that none is ever printed or stored.

A key pasted into a config (``api: {api_key: sk-…}``, ``base_url: https://host/v1?api_key=sk-…``)
would otherwise be echoed by an error message, written to a CI log or kept with a rule's params
in ``.snakemake/metadata``. :func:`memaudit.config.validate_config` refuses such a config before
anything reads it, naming the dotted key and never the value.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from urllib.parse import parse_qsl, urlsplit

# Provider key formats: OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), Hugging Face (hf_), GitHub
# (ghp_ and kin), AWS access key ids, Slack, Google API keys, JWTs, PEM private keys, bearer tokens.
_KEY_PATTERNS = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-[A-Za-z0-9_-]{12,}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AIza[0-9A-Za-z_-]{30,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # the signature too
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
    r"|(?i:\bbearer\s+[A-Za-z0-9._~+/=-]{8,})"
    # HTTP Basic credentials (base64 of user:password): a digit, + / or = in the run, so prose ("Basic
    # understanding") is left alone
    r"|(?i:\bbasic)\s+(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{8,}={0,2}")

# Names under which a long random-looking value is a secret (api_key, token, client_secret, …).
_KEYISH_NAME = re.compile(r"(?i)(?:^|[_.-])(?:api_?key|apikey|key|token|secret|password|passwd|pwd|credentials?"
                          r"|auth|authorization|bearer|signature|sig)(?:$|[_.-])")

# Query parameters that carry credentials (compared lower-case, with - and _ ignored).
URL_CREDENTIAL_PARAMS = ("key", "apikey", "token", "accesstoken", "authtoken", "idtoken", "refreshtoken",
                         "auth", "authorization", "signature", "sig", "xamzsignature", "xamzcredential",
                         "xamzsecuritytoken", "xgoogsignature", "secret", "clientsecret", "password", "pass",
                         "pwd", "passwd", "pw", "credential", "credentials", "jwt", "bearer", "session",
                         "sessiontoken", "xapikey", "code")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

NOT_SHOWN = "the value is not shown"


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def high_entropy(value: str) -> bool:
    """A long random-looking token: 32+ hex digits, or 20+ characters mixing upper and lower case and
    digits with at most two separators and over 3.5 bits a character (not a name like ``pythia-1.4b-dedup``)."""
    if len(value) < 20 or any(c.isspace() for c in value):
        return False
    if re.fullmatch(r"[0-9a-fA-F]{32,}", value):
        return True
    return (any(c.islower() for c in value) and any(c.isupper() for c in value) and any(c.isdigit() for c in value)
            and sum(c in "-_./" for c in value) <= 2 and _entropy(value) > 3.5)


def keyish_name(name: object) -> bool:
    """Whether a config key's name says its value is a secret (``api_key``, ``token``, ``client_secret``)."""
    return isinstance(name, str) and bool(_KEYISH_NAME.search(name))


def looks_like_credential(value: str) -> bool:
    """Whether a string holds something in a provider key's format (``sk-…``, ``sk-ant-…``, ``hf_…``,
    ``Bearer …``, a JWT, a PEM private key …)."""
    return bool(_KEY_PATTERNS.search(value))


def looks_like_a_key_not_a_variable(value: str) -> bool:
    """For ``api_key_env``: environment variable names are identifiers; keys have dashes
    (``sk-…``, ``sk-ant-…``) or are long mixed-case runs with digits."""
    if not _ENV_NAME.fullmatch(value):
        return True
    return len(value) >= 24 and any(c.islower() for c in value) and any(c.isdigit() for c in value)


API_KEY_ENV_PROBLEM = ("must name an environment variable (e.g. OPENAI_API_KEY) that holds the key, "
                       "not the key itself; " + NOT_SHOWN)
CREDENTIAL_PROBLEM = ("looks like an API key or token (" + NOT_SHOWN + "); keep keys out of the config: "
                      "put the key in an environment variable and name that variable in api_key_env")


def url_credential_problem(url: str) -> str | None:
    """Why a URL must not be configured (it carries credentials), or None. The message shows no part of it."""
    try:
        parts = urlsplit(url)
        has_userinfo = bool(parts.username or parts.password) or "@" in parts.netloc
        port = parts.port  # a ValueError for one outside 0-65535 or not a number
    except ValueError as exc:  # "Invalid IPv6 URL" (an unclosed [), a port out of range: its requests fail later
        return f"is not a URL that can be parsed ({'its port' if 'port' in str(exc).lower() else exc}); " + NOT_SHOWN
    if not has_userinfo and not parts.hostname:  # "http://", "http:///v1": every request a connection error
        return "names no host (http://HOST[:PORT]/...); " + NOT_SHOWN
    if port == 0:
        return "is not a URL that can be parsed (its port); " + NOT_SHOWN
    if has_userinfo:
        return ("must not contain credentials (user:password@); put the key in the variable named by "
                "api_key_env; " + NOT_SHOWN)
    # ;params of a path segment too (https://host/v1;api-key=...): a server may read them as a query
    path_params = ";".join(segment.partition(";")[2] for segment in parts.path.split("/") if ";" in segment)
    for text in (parts.query, parts.fragment, path_params.replace(";", "&")):
        for name, value in parse_qsl(text, keep_blank_values=True):
            if credential_param(name):
                return (f"must not carry credentials in its query string (parameter {_safe_name(name)!r}); "
                        f"put the key in the variable named by api_key_env; " + NOT_SHOWN)
            if looks_like_credential(value) or high_entropy(value):
                return ("must not carry credentials in its query string (a value looks like a key); "
                        "put the key in the variable named by api_key_env; " + NOT_SHOWN)
    if looks_like_credential(parts.path) or any(high_entropy(segment.partition(";")[0])
                                                for segment in parts.path.split("/")):
        return "must not carry credentials in its path; " + NOT_SHOWN
    return None


def _safe_name(name: str) -> str:
    return name if len(name) <= 40 and not looks_like_credential(name) else "<not shown>"


def safe_key(name: object) -> str:
    """A config key as it may appear in a dotted path (a pasted key used as a mapping key is hidden)."""
    text = str(name)
    return "<a key that looks like a credential>" if looks_like_credential(text) else text


def is_url(value: str) -> bool:
    return bool(re.match(r"(?i)^[a-z][a-z0-9+.-]*://", value.strip()))


def credential_problems(config: object, path: tuple = ()) -> list[tuple[tuple, str]]:
    """``(path, message)`` for every value in ``config`` that is or carries a credential.

    A string in a provider key's format anywhere; a long random-looking string under a key-ish
    name (``token``, ``client_secret``); a URL with userinfo or credential query parameters; an
    ``api_key_env`` that is a key rather than a variable name; a mapping key that is itself a key.
    """
    found: list[tuple[tuple, str]] = []
    if isinstance(config, dict):
        for name, value in config.items():
            if isinstance(name, str) and looks_like_credential(name):
                found.append(((*path, name), CREDENTIAL_PROBLEM))
                continue
            found += credential_problems(value, (*path, name))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            found += credential_problems(value, (*path, i))
    elif isinstance(config, str):
        name = path[-1] if path else None
        if name == "api_key_env":
            if looks_like_a_key_not_a_variable(config):
                found.append((path, API_KEY_ENV_PROBLEM))
        elif is_url(config) and url_credential_problem(config):
            found.append((path, url_credential_problem(config)))
        elif looks_like_credential(config) or (keyish_name(name) and high_entropy(config)):
            found.append((path, CREDENTIAL_PROBLEM))
    return found


# A credential as a header line or an assignment in a message ("api-key: ...", "x-api-key=...", "Helicone-Auth:
# ...", "Authorization: ..."): the value after the name, whatever its format
_CREDENTIAL_FIELD = re.compile(r"(?i)\b((?:x-)?api[-_]?key|[a-z][a-z0-9-]*-(?:api-key|auth|authorization|token|key)"
                               r"|authorization|proxy-authorization)(\s*[:=]\s*)(\"?)(?!\*\*\*)[^\s\"',;&]{8,}")
# Query (or ;path) parameters of a URL in a message: ?api-key=..., &token=...
_URL_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.-]+)=([^&#\s\"'<>]+)")
# A URL's userinfo, up to the last @ before its path (a password may hold @), of any scheme (wss://, ftp://)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#]*@")


def credential_param(name: str) -> bool:
    """Whether a URL query parameter's name says it carries a credential (``api-key``, ``token``, ``sig``)."""
    squashed = name.lower().replace("-", "").replace("_", "")
    return squashed in URL_CREDENTIAL_PARAMS or squashed.endswith(("key", "token", "secret", "signature"))


def redact(text: str, mask: str = "<not shown>") -> str:
    """``text`` with every credential-looking run replaced by ``mask`` (for messages quoting a line of
    a config file; :func:`memaudit.backends.secrets.redact` uses it with ``***`` at run time): a value
    in a provider key's format, a credential header's or assignment's value, a URL's credential query
    parameters and its userinfo."""
    text = _KEY_PATTERNS.sub(mask, text)
    text = _CREDENTIAL_FIELD.sub(lambda m: f"{m[1]}{m[2]}{m[3]}{mask}", text)
    text = _URL_PARAM.sub(lambda m: f"{m[1]}{m[2]}={mask}" if credential_param(m[2]) else m[0], text)
    return _URL_USERINFO.sub(lambda m: f"{m[1]}{mask}@", text)
