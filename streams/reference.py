"""The references of the documentation, generated from the code: every configuration key
(from :class:`~common.config.StreamsConfig` and the commented defaults file), every
command and option of ``streams-eos`` (from its argument parser), and every error a user
can meet (from the exception classes' docstrings).

The documentation's build (``docs/hooks.py``) puts them into its pages, and the suite
checks that none is missing: a key without its meaning in ``conf/streams-defaults.properties``,
a command or an option without help, an error without a docstring.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.config import StreamsConfig
from common.errors import StreamsError
from streams.cli import build_parser

#: The commented defaults file: each key's meaning is the comment above it.
DEFAULTS_FILE = Path(__file__).resolve().parents[1] / "conf" / "streams-defaults.properties"


#: Where each key comes from in Kafka (the same name there), or ``None``: this project's
#: own. A new key must be placed here (the suite checks it).
KAFKA_ORIGIN: dict[str, str | None] = {
    **dict.fromkeys(
        [
            "application.id",
            "processing.guarantee",
            "commit.interval.ms",
            "num.stream.threads",
            "state.dir",
            "default.key.serde",
            "default.value.serde",
            "statestore.uncommitted.max.bytes",
            "poll.ms",
            "max.task.idle.ms",
            "default.dsl.store",
            "default.timestamp.extractor",
            "statestore.cache.max.bytes",
            "state.cleanup.delay.ms",
            "rocksdb.config.setter",
            "repartition.purge.interval.ms",
            "metrics.recording.level",
            "metrics.sample.window.ms",
            "metrics.num.samples",
            "deserialization.exception.handler",
            "processing.exception.handler",
            "production.exception.handler",
            "errors.dead.letter.queue.topic.name",
            "ensure.explicit.internal.resource.naming",
        ],
        "Kafka Streams",
    ),
    **dict.fromkeys(
        [
            "max.poll.records",
            "metadata.max.age.ms",
            "session.timeout.ms",
            "heartbeat.interval.ms",
            "max.poll.interval.ms",
            "auto.offset.reset",
        ],
        "consumer",
    ),
    **dict.fromkeys(
        [
            "transaction.max.timeout.ms",
            "num.partitions",
            "group.initial.rebalance.delay.ms",
            "log.cleaner.enable",
            "log.retention.check.interval.ms",
            "log.cleaner.backoff.ms",
            "log.retention.ms",
            "log.retention.bytes",
            "log.segment.bytes",
            "log.roll.ms",
            "log.segment.delete.delay.ms",
            "log.cleaner.min.compaction.lag.ms",
        ],
        "broker",
    ),
    **dict.fromkeys(
        [
            "topics.root",
            "storage.options",
            "checkpoint.location",
            "batch.spark.partitions",
            "task.hosts.max",
            "restore.wait.ms",
            "stall.timeout.ms",
            "processing.engine",
            "statestore.snapshot.interval",
            "statestore.verify.on.open",
            "statestore.snapshots.kept",
            "log.delta.retention.ms",
            "metrics.port",
        ],
        None,
    ),
    "transaction.timeout.ms": "producer",
    "delete.retention.ms": "topic",
}


@dataclass(frozen=True, slots=True)
class KeyDoc:
    """One configuration key: its name, type, default, what values it allows, what it
    means, and where Kafka has it (None: this project's own)."""

    name: str
    type: str
    default: str
    allowed: str
    meaning: str
    kafka: str | None = None


def config_keys(defaults_file: Path = DEFAULTS_FILE) -> list[KeyDoc]:
    """Every key of :class:`~common.config.StreamsConfig`, in the defaults file's order
    (then any it does not list, with no meaning: the suite fails on those)."""
    meanings, order = _commented_keys(defaults_file.read_text())
    docs = {}
    for name, field in StreamsConfig.model_fields.items():
        key = field.alias or name
        default = "" if field.is_required() else _default_text(field)
        docs[key] = KeyDoc(
            key,
            _type_text(field.annotation),
            default,
            str(field.description or ""),
            meanings.get(key, ""),
            KAFKA_ORIGIN.get(key),
        )
    ordered = [docs[k] for k in order if k in docs]
    return ordered + [d for k, d in sorted(docs.items()) if k not in meanings]


def _commented_keys(text: str) -> tuple[dict[str, str], list[str]]:
    """Key -> the comment block right above its commented-out assignment."""
    meanings: dict[str, str] = {}
    order: list[str] = []
    block: list[str] = []
    for line in text.splitlines():
        assignment = re.fullmatch(r"#([a-z][a-z0-9.\-_]*)=(.*)", line.strip())
        if assignment is not None:
            key = assignment.group(1)
            meanings[key] = " ".join(block).strip()
            order.append(key)
            block = []
        elif line.startswith("# "):
            block.append(line[2:].strip())
        elif line.strip() in ("", "#"):
            block = [] if not line.strip() else block
    return meanings, order


def _default_text(field: Any) -> str:
    if field.default_factory is not None:
        try:
            return str(field.default_factory())
        except TypeError:  # a factory of the other fields
            return "(derived)"
    value = field.default
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else str(value)


def _type_text(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    text = str(annotation) if text in ("Annotated", "Literal") else text
    found = re.search(r"Literal\[([^\]]*)\]", text)
    if found is not None:
        return "one of " + found.group(1).replace("'", "")
    for word in ("int", "bool", "str", "float", "list", "dict"):
        if re.search(rf"\b{word}\b", text):
            return {"str": "string", "bool": "boolean", "int": "integer"}.get(word, word)
    return text


def config_markdown() -> str:
    """The configuration reference: one section per key."""
    out = []
    for doc in config_keys():
        out.append(f"### `{doc.name}`\n")
        shown = f"`{doc.default}`" if doc.default else "none"
        origin = f"Kafka's name ({doc.kafka})" if doc.kafka else "this project's own"
        out.append(f"*{doc.type}*, default {shown}; {origin}. Allowed: {doc.allowed}.\n")
        out.append(f"{doc.meaning}\n")
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class CommandDoc:
    """One command of ``streams-eos``: its name, summary, description, and options (flags,
    metavar, help)."""

    name: str
    summary: str
    description: str
    options: list[tuple[str, str, str]]


def commands() -> list[CommandDoc]:
    """Every command of ``streams-eos`` and its options, as its parser has them."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {a.dest: a.help or "" for a in sub._get_subactions()}
    out = []
    for name, command in sub.choices.items():
        options = []
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(action.option_strings) or action.metavar or action.dest
            metavar = "" if not action.option_strings or action.nargs == 0 else action.metavar
            options.append((str(flags), str(metavar or ""), str(action.help or "")))
        out.append(CommandDoc(name, summaries.get(name, ""), command.description or "", options))
    return out


_PIPE = "\\|"


def cli_markdown() -> str:
    """The command reference: each command, what it does, its options."""
    out = []
    for command in commands():
        out.append(f"### `streams-eos {command.name}`\n")
        out.append(f"{command.description or command.summary}\n")
        out.append("| option | what it does |\n|---|---|")
        for flags, metavar, text in command.options:
            shown = f"{flags} {metavar}".strip().replace("|", _PIPE)
            out.append(f"| `{shown}` | {text.replace('|', _PIPE)} |")
        out.append("")
    return "\n".join(out)


def errors() -> list[tuple[str, str]]:
    """Every error class a user can meet (every subclass of
    :class:`~common.errors.StreamsError` in the project's packages): its name and what it
    means and what to do (its docstring)."""
    for package in ERROR_PACKAGES:
        _import_all(package)
    found: dict[str, str] = {}
    todo = [StreamsError]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not cls.__name__.startswith("_") and cls.__module__.split(".")[0] in ERROR_PACKAGES:
            found.setdefault(cls.__name__, inspect.cleandoc(cls.__doc__ or ""))
    return sorted(found.items())


#: The packages whose errors :func:`errors` lists.
ERROR_PACKAGES = ("common", "statestores", "topology", "runtime", "streams")


def _import_all(package: str) -> None:
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, f"{package}."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)


def errors_markdown() -> str:
    """The troubleshooting reference: each error and its meaning."""
    return "\n".join(f"### `{name}`\n\n{text}\n" for name, text in errors())


def public_names() -> dict[str, str]:
    """Every public name of the ``streams`` facade -> the module that defines it."""
    import streams  # noqa: PLC0415 - the facade itself, whose names this lists

    exports: dict[str, str] = dict(streams._EXPORTS)
    return {name: exports[name] for name in sorted(streams.__all__) if name in exports}


def api_markdown() -> str:
    """The API reference: every public name, from its docstring (mkdocstrings' ``:::``
    directives), in the modules' order of the layers."""
    by_module: dict[str, list[str]] = {}
    for name, module in public_names().items():
        by_module.setdefault(module, []).append(name)
    out = []
    for module in sorted(by_module):
        out.append(f"## `{module}`\n")
        out.extend(f"::: {module}.{name}\n" for name in by_module[module])
    return "\n".join(out)
