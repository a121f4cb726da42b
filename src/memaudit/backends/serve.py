"""``memaudit serve``: a local model behind the OpenAI Chat Completions (and Anthropic Messages) API.

Black-box probes written for ChatGPT or Claude can then be tried on an open
model: point an ``openai`` backend's ``base_url`` at ``http://127.0.0.1:8000/v1``.
The server itself is :class:`memaudit.backends.server.ChatServer`; ``--scripted``
puts a :class:`memaudit.backends.scripted.ScriptedResponder` behind it instead of
a model.
"""

from __future__ import annotations

import argparse
import errno
import math
from pathlib import Path
from typing import Sequence

from memaudit.backends.scripted import ScriptedResponder
from memaudit.backends.server import ChatServer, HFResponder, Responder
from memaudit.errors import InputError


def serve_main(argv: Sequence[str] | None = None) -> int:
    """``memaudit serve``: serve a local model (or a reply script) until interrupted."""
    server = make_server(argv)
    name = server.model_name
    print(f"serving {name!r} at {server.openai_base_url} (OpenAI Chat Completions; Anthropic Messages at "
          f"{server.anthropic_base_url}/v1/messages); Ctrl-C stops", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse nonsense numbers before a model loads (minutes): a ``--max-batch`` below 1 was served as 1
    without a word, a ``--port`` outside 0-65535 failed in bind() after the load, and a negative, nan or
    infinite ``--latency`` in every request's thread."""
    if args.max_batch < 1:
        raise InputError(f"--max-batch: must be at least 1, not {args.max_batch}")
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port: must be 0 to 65535 (0: any free port), not {args.port}")
    if not (math.isfinite(args.latency) and args.latency >= 0):
        raise InputError(f"--latency: must be a finite number of seconds >= 0, not {args.latency:g}")


# the options of a model (not of --scripted), with their defaults
MODEL_OPTION_DEFAULTS = {"adapter": None, "device": "auto", "dtype": "auto", "max_batch": 16,
                         "cache_dir": "resources/cache"}


def refuse_ignored(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``parser.error`` for an option the chosen source does not read: ``--scripted FILE --adapter /nonexistent
    --device bogus`` started without a word, and ``--revision`` with ``--path`` or ``--builtin`` was dropped."""
    if args.revision is not None and not args.hub_id:
        parser.error("--revision: only with --hub-id (a --path, --builtin or --scripted source has no hub commit)")
    if args.scripted:
        given = [f"--{o.replace('_', '-')}" for o in MODEL_OPTION_DEFAULTS if getattr(args, o) is not None]
        if given:
            parser.error(f"{', '.join(given)}: not with --scripted (no model: the replies come from the file)")
    if args.cache_dir is not None and not args.builtin:
        parser.error("--cache-dir: only with --builtin (where a builtin model is converted)")


def listen_error(host: str, port: int, exc: OSError) -> str:
    """One line for a ``--host``/``--port`` the server cannot listen on (bind()'s OSError)."""
    if exc.errno == errno.EADDRINUSE:
        return (f"--port {port}: {host}:{port} is already in use (another server listens there); choose another "
                "port, or 0 for any free one")
    return f"--host {host} --port {port}: cannot listen there ({exc.strerror or exc})"


def make_server(argv: Sequence[str] | None = None) -> ChatServer:
    """The server ``memaudit serve`` runs for ``argv`` (listening, not yet serving; the port is bound before
    the model loads, so a port in use is a one-line error at once).

    The model is served under ``--name`` (default: the last part of its path, hub id or builtin
    name), which is also the name its backend's errors give (a prompt too long, say)."""
    p = argparse.ArgumentParser(prog="memaudit serve", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--path", help="a local Hugging Face model directory")
    src.add_argument("--hub-id", help="a hub model id (needs --revision)")
    src.add_argument("--builtin", help="a builtin demo model, e.g. smollm2-135m-instruct")
    src.add_argument("--scripted", type=Path, help='no model: answer from a JSON file {"replies": {prompt: answer}}')
    p.add_argument("--revision", help="the hub commit to load (with --hub-id)")
    p.add_argument("--adapter", help="a peft adapter directory on top of the model")
    p.add_argument("--name", default=None, help="the model name clients send (default: derived from the source)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="listen port, 0 to 65535 (0: any free one; default: 8000)")
    # defaults None, set after refuse_ignored: an option given is told from one left at its default
    p.add_argument("--device", help="auto (a GPU if present; the default), cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto (the default): bfloat16 where the hardware computes it natively, else float32")
    p.add_argument("--cache-dir", help="where builtin models are converted (with --builtin; default: resources/cache)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer (benchmarks)")
    p.add_argument("--max-batch", type=int,
                   help="greedy requests waiting at once are decoded together, this many rows at a time; 1: each "
                        "answer independent of the others waiting (in bfloat16, batching changes some answers; default: 16)")
    args = p.parse_args(argv)
    refuse_ignored(p, args)
    for option, default in MODEL_OPTION_DEFAULTS.items():
        if getattr(args, option) is None:
            setattr(args, option, default)
    check_numbers(args)
    name = args.name or ("scripted" if args.scripted else Path(args.path or args.hub_id or args.builtin).name)
    # Listening before the model loads (minutes): a port in use is said at once, not after the load
    try:
        server = ChatServer(None, host=args.host, port=args.port, latency=args.latency, model_name=name)
    except OSError as exc:
        raise InputError(listen_error(args.host, args.port, exc)) from None
    try:
        server.responder = make_responder(args, name)
    except BaseException:
        server.close()
        raise
    return server


def make_responder(args: argparse.Namespace, name: str) -> Responder:
    """What answers ``memaudit serve``'s requests: the reply script, or the model (loaded now)."""
    if args.scripted:
        return ScriptedResponder.from_file(args.scripted)
    from memaudit.backends.base import GENERATE
    from memaudit.backends.hf import HFBackend
    from memaudit.models.loading import load_model

    if args.path:
        spec: dict = {"path": args.path}
    elif args.hub_id:
        spec = {"hub_id": args.hub_id, "revision": args.revision}
    else:
        spec = {"builtin": args.builtin, "cache_dir": args.cache_dir}
    if args.adapter:
        spec["adapter"] = args.adapter
    model, tok = load_model(spec, dtype=args.dtype, device=args.device)
    # named: the backend's errors say which model (they said "model None")
    backend = HFBackend(spec, name=name, model=model, tokenizer=tok)
    backend.require({GENERATE}, "memaudit serve")  # a masked LM answers no request: said now, not per request
    return HFResponder(backend, max_rows=args.max_batch)
