"""The docs against what they describe: every relative link in the README and docs/ opens a file that
exists, at a heading that exists; config/README.md and the probe pages' settings name every schema key
with the schema's defaults; every ``memaudit`` option has help and every flag the docs give exists; every
``results/`` path the docs name is a rule's output; the metrics table names every column of metrics.csv;
every YAML example validates beside the demo config."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "config" / "README.md", ROOT / "benchmarks" / "README.md",
         *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors (lower case, punctuation but '-' and '_' dropped, spaces to '-')
    and explicit ``<a id="...">`` ones."""
    out = set(re.findall(r'<a id="([^"]+)"', page.read_text()))
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http(s):, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return bad


def test_anchor_rule_matches_githubs():
    page = ROOT / "docs" / "models.md"
    assert {"dtype-auto", "api-models", "cache-retries-refusals"} <= anchors(page)
    assert "the-length-confound" in anchors(ROOT / "docs" / "probes" / "ktd.md")
    assert "no-such-heading" not in anchors(page)


def test_every_relative_link_resolves():
    assert len(PAGES) > 10
    bad = [b for page in PAGES for b in broken_links(page)]
    assert bad == []


def test_the_headlines_pointer_to_the_fragile_checks_resolves():
    from memaudit.stats.headline import FRAGILE_CHECKS

    path, _, anchor = FRAGILE_CHECKS.partition("#")
    assert anchor and anchor in anchors(ROOT / path)


def test_every_page_a_report_caption_names_exists():
    """A caption names the docs page that explains its figure or table (``See docs/<page>.md``)."""
    captions = sorted((ROOT / "workflow" / "report").glob("*.rst"))
    named = {(c.name, p) for c in captions for p in re.findall(r"docs/[\w/.-]+?\.md", c.read_text())}
    assert ("summary_selection.rst", "docs/statistics.md") in named
    assert [(c, p) for c, p in sorted(named) if not (ROOT / p).exists()] == []


def test_the_reports_front_page_lists_every_category_the_rules_use():
    """workflow.rst tells a reader how the report is grouped: every ``category=`` of the rules is in its list
    (a family's rule file adds one), and the list names no category that no rule uses."""
    rules = "".join(p.read_text() for p in sorted((ROOT / "workflow" / "rules").glob("*.smk")))
    used = set(re.findall(r'\bcategory="([^"{]+)"', rules))
    assert {"Summary", "DE-COP", "KTD", "Cloze probes", "CopyBench", "FDR-controlled selection"} <= used
    front = (ROOT / "workflow" / "report" / "workflow.rst").read_text()
    listed = set(re.search(r"grouped by category \(([^)]*)\)", front).group(1).replace("\n", " ").split(", "))
    assert sorted(listed) == sorted(used)


# ----------------------------------------------------------------------------- config/README.md against the schema

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
CONFIG_README = ROOT / "config" / "README.md"
CLAIMED_DEFAULT = re.compile(r"`([a-z_][\w.]*)` (-?\d[\d.]*\b|\[[^\]]*\])")


def schema_nodes() -> dict[tuple[str, ...], dict]:
    """Every key of the config schema by its path (``<name>`` for a name the user chooses), ``$ref`` resolved."""
    import yaml

    schema = yaml.safe_load(SCHEMA.read_text())
    nodes: dict[tuple[str, ...], dict] = {}

    def walk(node: dict, path: tuple[str, ...]) -> None:
        if "$ref" in node:
            node = {**schema["$defs"][node["$ref"].rsplit("/", 1)[1]], **node}
        nodes[path] = node
        for key, sub in node.get("properties", {}).items():
            walk(sub, path + (key,))
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], path + ("<name>",))
        for alternative in node.get("oneOf", []):
            walk(alternative, path)

    walk(schema, ())
    return nodes


def readme_rows(text: str) -> list[tuple[list[tuple[str, ...]], str]]:
    """config/README.md's table: per row the keys its first column names and the text of the second.
    After a full dotted key, a bare name or ``.name`` is a sibling (``checkpoints.dir``, ``every_steps``)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        key_column, meaning = line[2:].split(" | ", 1)
        names = re.findall(r"`([^`]+)`", key_column)
        first = tuple("<name>" if part.startswith("<") else part for part in names[0].split("."))
        keys = [first]
        for name in names[1:]:
            parts = tuple("<name>" if p.startswith("<") else p for p in name.lstrip(".").split("."))
            keys.append(first[:-1] + parts if name.startswith(".") or len(parts) == 1 else parts)
        rows.append((keys, meaning))
    return rows


def undocumented_keys(text: str) -> list[str]:
    """Schema keys no row of config/README.md documents: a row's key, or a key below it whose every further
    part the row names in backticks (``probes.ktd``'s row naming `m`). A block counts where a key inside it does."""
    nodes = schema_nodes()
    rows = [(keys, set(re.findall(r"[A-Za-z_]\w*", " ".join(re.findall(r"`([^`]+)`", meaning)))))
            for keys, meaning in readme_rows(text)]

    def documented(path: tuple[str, ...]) -> bool:
        return any(path == key or (path[:len(key)] == key and all(p in names or p == "<name>" for p in path[len(key):]))
                   for keys, names in rows for key in keys)

    missing = []
    for path in nodes:
        if not path or documented(path):
            continue
        if any(other[:len(path)] == path and documented(other) for other in nodes if len(other) > len(path)):
            continue  # a block: its keys are documented one by one
        missing.append(".".join(path))
    return missing


def wrong_defaults(text: str) -> list[str]:
    """A default config/README.md states ("`m` 10", "`ms` [1, 2, 5, 10]") that is not the schema's. A name
    is looked up inside the row's key and the parenthesised settings it stands in (`paraphrase` (`temperature` 0.1))."""
    import yaml

    nodes = schema_nodes()
    bad = []
    for keys, meaning in readme_rows(text):
        base = keys[0]
        stack: list[str | None] = []
        for i, ch in enumerate(meaning):
            if ch == "(":
                opener = re.search(r"`([a-z_][\w.]*)` $", meaning[:i])
                stack.append(opener.group(1) if opener else None)
            elif ch == ")" and stack:
                stack.pop()
            elif ch == "`" and (claim := CLAIMED_DEFAULT.match(meaning, i)):
                inner = tuple(p for name in stack if name for p in name.split("."))
                sub = tuple(claim.group(1).split("."))
                node = next((nodes[p + sub] for p in (base + inner, base, base[:-1]) if p + sub in nodes), None)
                if node is None or "default" not in node:
                    continue
                if yaml.safe_load(claim.group(2)) != node["default"]:
                    bad.append(f"{'.'.join(base + inner + sub)}: README says {claim.group(2)}, "
                               f"the schema's default is {node['default']!r}")
    return bad


def test_every_schema_key_is_in_config_readme():
    assert len(schema_nodes()) > 200
    assert undocumented_keys(CONFIG_README.read_text()) == []


def test_every_key_config_readme_names_is_in_the_schema():
    nodes = schema_nodes()
    named = [key for keys, _ in readme_rows(CONFIG_README.read_text()) for key in keys]
    assert len(named) > 60
    assert [".".join(k) for k in named if k not in nodes] == []


def test_the_defaults_config_readme_states_are_the_schemas():
    assert wrong_defaults(CONFIG_README.read_text()) == []


def test_the_config_readme_checks_catch_what_they_are_for():
    rows = ("| `probes.ktd` | `m` 2, `ms` [1, 2, 3], `n_draws` 5 |\n"
            "| `probes.decop` | `fdr` 0.1, `paraphrase` (`model`, `temperature` 0.5), `max_answer_tokens` 8 |\n")
    assert wrong_defaults(rows) == ["probes.ktd.m: README says 2, the schema's default is 10",
                                    "probes.ktd.ms: README says [1, 2, 3], the schema's default is [1, 2, 5, 10]",
                                    "probes.decop.paraphrase.temperature: README says 0.5, the schema's default is 0.1"]
    missing = undocumented_keys(CONFIG_README.read_text().replace("`validation_texts` 100 and ", ""))
    assert missing == ["probes.ktd.validation_texts"]


# ----------------------------------------------------------------------------- the command line's --help and the docs


class _Parsed(Exception):
    pass


def cli_parsers(monkeypatch) -> dict[str, "argparse.ArgumentParser"]:
    """Each ``memaudit`` subcommand's parser, caught as it parses (nothing runs)."""
    import argparse

    from memaudit.cli import COMMANDS, main

    caught = {}

    def catch(self, args=None, namespace=None):
        caught[self.prog.removeprefix("memaudit ")] = self
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", catch)
    for command in COMMANDS:
        try:
            main([command])
        except _Parsed:
            pass
    assert sorted(caught) == sorted(COMMANDS)
    return caught


def undescribed_options(parser) -> list[str]:
    """Options whose --help line says nothing, or hides the default the command takes without them."""
    import argparse

    bad = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        if not action.help:
            bad.append(f"{parser.prog} {name}: no help")
        elif action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in action.help:
            bad.append(f"{parser.prog} {name}: help does not give the default {action.default!r}")
    return bad


def test_every_option_of_every_command_says_what_it_is_and_its_default(monkeypatch):
    parsers = cli_parsers(monkeypatch)
    assert [p for parser in parsers.values() for p in undescribed_options(parser)] == []


def test_an_option_without_help_is_caught():
    import argparse

    parser = argparse.ArgumentParser(prog="memaudit demo")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1", help="listen address")
    parser.add_argument("--name", help="the model name")
    assert undescribed_options(parser) == ["memaudit demo --port: no help",
                                           "memaudit demo --host: help does not give the default '127.0.0.1'"]


DOC_COMMAND = re.compile(r"memaudit ([a-z][a-z-]+)((?: +(?:\\\n *)?[^`\n|;]*)?)")


def test_every_flag_the_docs_give_a_memaudit_command_exists(monkeypatch):
    """`memaudit stats --input x --score-col score` in a page: stats takes --input and --score-col."""
    parsers = cli_parsers(monkeypatch)
    pages = [p for p in PAGES if p.name != "timings.md"] + [ROOT / "src" / "memaudit" / "cli.py"]
    seen, bad = 0, []
    for page in pages:
        for command, rest in DOC_COMMAND.findall(page.read_text()):
            if command not in parsers:
                continue
            known = {s for a in parsers[command]._actions for s in a.option_strings}
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest):
                seen += 1
                if flag not in known:
                    bad.append(f"{page.relative_to(ROOT)}: memaudit {command} {flag}")
    assert seen > 15
    assert bad == []


# ----------------------------------------------------------------------------- results/ paths the docs name

# Files under results/ that no rule declares as an output: the API cache and the generation cache (config
# defaults), the report (`snakemake --report`), the checkpoints (deliberately not outputs), make bench's files.
NOT_RULE_OUTPUTS = ("results/api/cache.sqlite", "results/models/generations.sqlite", "results/report.html",
                    "results/checkpoints", "results/bench/")
DOC_RESULT_PATH = re.compile(r"results/[\w<>{}.,*/-]*[\w>}/*]")


def rule_outputs() -> set[str]:
    """Every ``results/…`` path the rules write, each wildcard (``{benchmark}``) as ``{}``."""
    return {re.sub(r"\{[^}]*\}", "{}", m)
            for smk in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
            for m in re.findall(r"\"(results/[^\"]+)\"", smk.read_text())}


def expand(path: str) -> list[str]:
    """``{roc,score_distributions}.{png,svg}`` as four paths; a placeholder (``<benchmark>``, ``…``) as ``<>``."""
    alternatives = re.search(r"\{([^{}]*,[^{}]*)\}", path)
    if alternatives:
        return [p for alt in alternatives.group(1).split(",")
                for p in expand(path[:alternatives.start()] + alt + path[alternatives.end():])]
    return [re.sub(r"<[^>]*>|…", "<>", path).rstrip("/")]


def produced(path: str, outputs: set[str]) -> bool:
    """A rule writes ``path``, or a file under it (a folder): the docs' placeholders match any part of a path
    component, the rules' wildcards a whole component."""
    doc = re.compile(re.escape(path).replace("<>", "[^/]*") + "(/.*)?$")
    return any(doc.match(out) or re.match(re.escape(out).replace(r"\{\}", "[^/]+") + "$", path) for out in outputs)


def unknown_result_paths(pages) -> list[str]:
    outputs = rule_outputs()
    return [f"{page.relative_to(ROOT)}: {path}" for page in pages for path in DOC_RESULT_PATH.findall(page.read_text())
            if not path.startswith(NOT_RULE_OUTPUTS) and "*" not in path
            and not all(produced(one, outputs) for one in expand(path))]


def test_every_results_path_the_docs_name_is_a_rule_output():
    pages = [p for p in PAGES if p.name not in ("timings.md", "adding-a-probe-family.md")]  # its example is not built
    assert sum(len(DOC_RESULT_PATH.findall(p.read_text())) for p in pages) > 80
    assert unknown_result_paths(pages) == []
    assert unknown_result_paths([ROOT / "docs" / "adding-a-probe-family.md"]) == [
        "docs/adding-a-probe-family.md: results/scores/{benchmark}/{model}/recall_judge_documents.csv",
        "docs/adding-a-probe-family.md: results/scores/{benchmark}/{model}/recall_judge_ratings.jsonl"]


# The settings section of each probe page that lists its block's keys one by one.
PROBE_SETTINGS = {"token_prob.md": ("probes", "token_prob"), "prefix.md": ("probes", "prefix"),
                  "ktd.md": ("probes", "ktd"), "copybench.md": ("probes", "copybench"),
                  "decop.md": ("probes", "decop", "paraphrase")}


def settings_gaps(page: Path, block: tuple[str, ...]) -> list[str]:
    """Keys of ``block`` that the page's settings section (the "## …settings…" heading to the next) never names."""
    text = page.read_text()
    section = re.search(r"^## [^\n]*[Ss]ettings[^\n]*\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)
    names = set(re.findall(r"[A-Za-z_]\w*", " ".join(re.findall(r"`([^`]+)`", section))))
    return [".".join(path) for path in schema_nodes() if path[:len(block)] == block and len(path) > len(block)
            and not all(part in names or part == "<name>" for part in path[len(block):])]


def test_every_key_of_a_probe_block_is_in_its_pages_settings():
    pages = ROOT / "docs" / "probes"
    assert {page: settings_gaps(pages / page, block) for page, block in PROBE_SETTINGS.items()} == dict.fromkeys(
        PROBE_SETTINGS, [])


def test_every_column_of_metrics_csv_is_in_the_metrics_table():
    """docs/statistics.md's table under "## Metrics" names every column of results/summary/metrics.csv."""
    from memaudit.stats.summary import SUMMARY_COLUMNS

    text = (ROOT / "docs" / "statistics.md").read_text()
    table = re.search(r"^## Metrics\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    rows = " ".join(line.split(" | ")[0] for line in table.splitlines() if line.startswith("| `"))
    named = set(re.findall(r"`(\w+)`", rows))
    assert len(SUMMARY_COLUMNS) > 15
    assert [c for c in SUMMARY_COLUMNS if c not in named] == []


# ----------------------------------------------------------------------------- the YAML examples in the docs

YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)
CONFIG_BLOCKS = ("seed", "benchmarks", "models", "pretrain", "api", "probes", "stats", "figures", "checkpoints")


def yaml_example_problems(page: Path, text: str | None = None) -> list[str]:
    """Each YAML example of ``page`` put into the demo config, as a user adds it to a copy: a config (or a
    few entries under ``models:``, the page's snippet for the demo's list) that memaudit refuses, as
    ``<page>:<line>: <the config error>``. A YAML syntax error is one too."""
    import copy

    import yaml

    from memaudit.errors import ConfigError
    from memaudit.jobs import validate_config

    demo = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())

    def merge(into: dict, extra: dict) -> None:
        for key, value in extra.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value

    text = page.read_text() if text is None else text
    bad = []
    for block in YAML_BLOCK.finditer(text):
        where = f"{page.relative_to(ROOT)}:{text[:block.start()].count(chr(10)) + 2}"
        try:
            example = yaml.safe_load(block.group(1))
        except yaml.YAMLError as exc:
            bad.append(f"{where}: not YAML: {str(exc).splitlines()[0]}")
            continue
        config = copy.deepcopy(demo)
        merge(config, example if set(example) & set(CONFIG_BLOCKS) else {"models": example})
        try:
            validate_config(config)
        except ConfigError as exc:
            bad += [f"{where}: {line}" for line in str(exc).splitlines()]
    return bad


def test_every_yaml_example_in_the_docs_is_a_config_memaudit_takes():
    """Apart from the placeholders a user fills in (a hub commit, a model of their own), every YAML example
    of the docs validates beside the demo config: a renamed or removed key in an example is caught."""
    pages = [p for p in PAGES if p.name != "timings.md"]
    assert sum(len(YAML_BLOCK.findall(p.read_text())) for p in pages) > 8
    placeholder = "must be a commit sha (40 lowercase hex digits), not '{}'; a branch or tag can move, so reruns " \
                  "could load other weights: pin the commit (the model's history on the hub) or set " \
                  "allow_moving_revision: true"
    # by page, not line: an edit above an example moves it (the line numbers are tested below)
    assert [re.sub(r":\d+: ", ": ", p, count=1) for page in pages for p in yaml_example_problems(page)] == [
        "README.md: config key models.pythia-1b.source.revision: " + placeholder.format("<commit hash>"),
        "docs/models.md: config key models.pythia-1b.source.revision: " + placeholder.format("<commit hash>"),
        # a control is wanted where CopyBench or the cloze probes run on the pair: the page says so
        "docs/models.md: config key models.suspect.control: only copybench and cloze pair a model with its "
        "control, and none of them probes 'suspect'; probe it there or remove control",
        "docs/probes/copybench.md: config key probes.copybench.event_judge.model: unknown model 'gpt-judge' "
        "(configured: smollm2-135m, smollm2-135m-contaminated, tiny-gpt2-medium, tiny-gpt2-medium-books, "
        "tiny-gpt2-medium-contaminated, tiny-gpt2-medium-news, tiny-gpt2-medium-qa, tiny-gpt2-small, "
        "tiny-gpt2-small-contaminated) (the copybench event_judge)",
        "docs/probes/ktd.md: config key models.t5-paraphraser.source.revision: "
        + placeholder.format("REPLACE_WITH_COMMIT")]


def test_the_yaml_example_check_catches_what_it_is_for():
    page = ROOT / "docs" / "models.md"
    text = "intro\n\n```yaml\nprobes:\n  ktd: {mm: 3}\n```\n\n```yaml\nmodels: [a\n```\n"
    assert yaml_example_problems(page, text) == [
        "docs/models.md:4: config key probes.ktd.mm: unknown key; did you mean 'm'? (known here: benchmarks, "
        "length_match, m, member_ratios, models, ms, n_draws, params, qs, reference_models, validation_texts)",
        "docs/models.md:9: not YAML: while parsing a flow sequence"]
