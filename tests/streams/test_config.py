"""Tests for common.config: every key's rule, the loaders, and the shipped defaults file."""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

import pytest

from common.conf import DEFAULTS_FILE
from common.config import StreamsConfig, StreamsDeprecationWarning, parse_properties
from common.errors import ConfigError

BASE = {"application.id": "app", "topics.root": "/data/topics"}
INT_KEYS = [
    "commit.interval.ms",
    "transaction.timeout.ms",
    "transaction.max.timeout.ms",
    "num.stream.threads",
    "num.partitions",
    "statestore.uncommitted.max.bytes",
    "max.poll.records",
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the caller's STREAMS_ROOT and STREAMS_CONFIG_* variables out of every test."""
    for name in list(os.environ):
        if name == "STREAMS_ROOT" or name.startswith("STREAMS_CONFIG_"):
            monkeypatch.delenv(name)


def make(**extra: object) -> StreamsConfig:
    """Build from BASE plus dotted keys given with "_" for "." (num_partitions=2)."""
    return StreamsConfig.from_dict({**BASE, **{k.replace("_", "."): v for k, v in extra.items()}})


def error_of(mapping: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as info:
        StreamsConfig.from_dict(mapping)
    return str(info.value)


def test_storage_options_are_gathered_from_their_prefixed_keys() -> None:
    config = StreamsConfig.from_dict(
        {
            **BASE,
            "storage.options.AWS_ENDPOINT_URL": "http://localhost:9000",
            "storage.options.AWS_REGION": "eu-west-1",
        }
    )
    assert config.storage_options == {
        "AWS_ENDPOINT_URL": "http://localhost:9000",
        "AWS_REGION": "eu-west-1",
    }
    properties = config.to_properties()
    assert properties["storage.options.AWS_REGION"] == "eu-west-1"
    assert StreamsConfig.from_dict(properties) == config  # round trip
    with pytest.raises(ConfigError, match="storage.options"):
        StreamsConfig.from_dict({**BASE, "storage.options": "AWS_REGION=eu-west-1"})


def test_minimal_config_has_the_documented_defaults() -> None:
    config = make()
    assert config.to_properties() == {
        "application.id": "app",
        "processing.guarantee": "at_least_once",
        "commit.interval.ms": "30000",
        "transaction.timeout.ms": "60000",
        "transaction.max.timeout.ms": "900000",
        "num.stream.threads": "1",
        "state.dir": os.path.join(tempfile.gettempdir(), "spark-streams-eos"),
        "topics.root": "/data/topics",
        "default.key.serde": "bytes",
        "default.value.serde": "bytes",
        "num.partitions": "1",
        "statestore.uncommitted.max.bytes": str(64 * 1024 * 1024),
        "max.poll.records": "1000",
        "batch.spark.partitions": "0",
        "task.hosts.max": "64",
        "restore.wait.ms": "2000",
        "metadata.max.age.ms": "300000",
        "poll.ms": "100",
        "stall.timeout.ms": "0",
        "max.task.idle.ms": "0",
        "session.timeout.ms": "45000",
        "heartbeat.interval.ms": "3000",
        "max.poll.interval.ms": "300000",
        "group.initial.rebalance.delay.ms": "3000",
        "auto.offset.reset": "earliest",
        "default.dsl.store": "rocksDB",
        "processing.engine": "columnar",
        "default.timestamp.extractor": "fail_on_invalid",
        "statestore.cache.max.bytes": "10485760",
        "statestore.snapshot.interval": "100",
        "statestore.verify.on.open": "true",
        "checkpoint.location": "",
        "state.cleanup.delay.ms": "600000",
        "rocksdb.config.setter": "",
        "delete.retention.ms": "86400000",
        "statestore.snapshots.kept": "2",
        "log.cleaner.enable": "true",
        "log.retention.check.interval.ms": "300000",
        "log.cleaner.backoff.ms": "15000",
        "repartition.purge.interval.ms": "30000",
        "log.retention.ms": "604800000",
        "log.retention.bytes": "-1",
        "log.segment.bytes": "67108864",
        "log.roll.ms": "604800000",
        "log.segment.delete.delay.ms": "60000",
        "log.cleaner.min.compaction.lag.ms": "0",
        "log.delta.retention.ms": "86400000",
        "deserialization.exception.handler": "log-and-fail",
        "processing.exception.handler": "log-and-fail",
        "production.exception.handler": "log-and-fail",
        "metrics.recording.level": "INFO",
        "metrics.sample.window.ms": "30000",
        "metrics.num.samples": "2",
        "metrics.port": "0",
        "errors.dead.letter.queue.topic.name": "",
        "ensure.explicit.internal.resource.naming": "false",
    }
    assert config.eos_enabled is False


def test_application_id_is_required() -> None:
    message = error_of({"topics.root": "/data"})
    assert message.startswith("application.id: missing")
    assert "[a-zA-Z0-9._-]" in message


@pytest.mark.parametrize("bad", ["my app", "app/1", "app:1", "appé", "", "   "])
def test_application_id_rejects_characters_invalid_in_topic_names(bad: str) -> None:
    message = error_of({**BASE, "application.id": bad})
    assert message.startswith("application.id: ")
    assert f"(got {bad!r})" in message
    assert "allowed: 1 to 249 characters from [a-zA-Z0-9._-]" in message


def test_application_id_length_limit_is_249() -> None:
    assert make(application_id="a" * 249).application_id == "a" * 249
    assert "250 characters" in error_of({**BASE, "application.id": "a" * 250})


def test_surrounding_whitespace_of_string_values_is_trimmed() -> None:
    config = make(
        application_id=" app ",
        state_dir=" /var/state ",
        processing_guarantee=" exactly_once_v2 ",
        auto_offset_reset="\tlatest ",
    )
    assert (config.application_id, config.state_dir) == ("app", "/var/state")
    assert (config.processing_guarantee, config.auto_offset_reset) == ("exactly_once_v2", "latest")


def test_application_id_accepts_every_allowed_character() -> None:
    assert make(application_id="My.App_2-x").application_id == "My.App_2-x"


@pytest.mark.parametrize(
    ("key", "bad", "allowed"),
    [
        ("processing.guarantee", "exactly_twice", ["at_least_once", "exactly_once_v2"]),
        ("auto.offset.reset", "smallest", ["earliest", "latest", "none"]),
        ("default.key.serde", "strng", ["bytes", "string", "int", "long", "double", "json"]),
        ("default.value.serde", "pkg..Name", ["bytes", "json", "pkg.module:Name"]),
    ],
)
def test_enum_keys_reject_other_values_and_list_the_allowed_ones(
    key: str, bad: str, allowed: list[str]
) -> None:
    message = error_of({**BASE, key: bad})
    assert message.startswith(f"{key}: ")
    assert f"(got {bad!r})" in message
    listed = message.split("allowed: ", 1)[1]
    assert all(value in listed for value in allowed)


@pytest.mark.parametrize("value", ["earliest", "latest", "none"])
def test_auto_offset_reset_accepts_each_allowed_value(value: str) -> None:
    assert make(auto_offset_reset=value).auto_offset_reset == value


@pytest.mark.parametrize(
    ("key", "bad", "good"),
    [
        ("commit.interval.ms", 0, 1),
        ("commit.interval.ms", -5, 59999),
        ("transaction.timeout.ms", 0, 30001),
        ("transaction.max.timeout.ms", 0, 60000),
        ("num.stream.threads", 0, 1),
        ("num.partitions", 0, 1),
        ("max.poll.records", 0, 1),
        ("statestore.uncommitted.max.bytes", 0, -1),
        ("statestore.uncommitted.max.bytes", -2, 1),
    ],
)
def test_integer_ranges(key: str, bad: int, good: int) -> None:
    message = error_of({**BASE, key: bad})
    assert message.startswith(f"{key}: ")
    assert f"(got {bad!r}); allowed: " in message
    assert StreamsConfig.from_dict({**BASE, key: good}).get(key) == good


@pytest.mark.parametrize("key", INT_KEYS)
@pytest.mark.parametrize("bad", [True, False, 1.5, "1.5", "ten", "", None])
def test_integer_keys_reject_bools_fractions_and_text(key: str, bad: object) -> None:
    message = error_of({**BASE, key: bad})
    assert message.startswith(f"{key}: ")
    assert f"(got {bad!r})" in message


@pytest.mark.parametrize(("given", "expected"), [("250", 250), (" 250 ", 250), (250.0, 250)])
def test_integer_keys_coerce_strings_and_whole_floats(given: object, expected: int) -> None:
    assert make(num_partitions=given).num_partitions == expected


def test_exactly_once_commit_interval_defaults_to_100() -> None:
    config = make(processing_guarantee="exactly_once_v2")
    assert config.commit_interval_ms == 100
    assert config.eos_enabled is True


def test_exactly_once_keeps_an_explicit_commit_interval() -> None:
    config = make(processing_guarantee="exactly_once_v2", commit_interval_ms="5000")
    assert config.commit_interval_ms == 5000


def test_exactly_once_beta_is_mapped_to_v2_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="common.config"),
        pytest.warns(
            StreamsDeprecationWarning, match="use processing.guarantee=exactly_once_v2"
        ) as record,
    ):
        config = make(processing_guarantee="exactly_once_beta")
    assert config.processing_guarantee == "exactly_once_v2"
    assert config.commit_interval_ms == 100
    assert issubclass(StreamsDeprecationWarning, FutureWarning)
    assert record[0].filename == __file__  # points at the caller, not at pydantic
    assert [r.levelno for r in caplog.records if r.name == "common.config"] == [logging.WARNING]


def test_exactly_once_alpha_is_kept_with_a_warning() -> None:
    with pytest.warns(
        StreamsDeprecationWarning, match="exactly_once is deprecated.*exactly_once_v2"
    ):
        config = make(processing_guarantee="exactly_once")
    assert config.processing_guarantee == "exactly_once"
    assert config.eos_enabled is True
    assert config.commit_interval_ms == 100


def test_at_least_once_and_exactly_once_v2_do_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    make(processing_guarantee="at_least_once")
    make(processing_guarantee="exactly_once_v2")
    assert not [w for w in recwarn if issubclass(w.category, StreamsDeprecationWarning)]


@pytest.mark.parametrize(
    "extra",
    [
        {"commit.interval.ms": 60000},
        {"commit.interval.ms": 70000, "transaction.timeout.ms": "60000"},
        {"processing.guarantee": "exactly_once_v2", "transaction.timeout.ms": 100},
    ],
)
def test_commit_interval_must_be_below_transaction_timeout(extra: dict[str, object]) -> None:
    message = error_of({**BASE, **extra})
    commit = int(str(extra.get("commit.interval.ms", 100)))
    timeout = int(str(extra.get("transaction.timeout.ms", 60000)))
    assert message.startswith("commit.interval.ms: must be less than transaction.timeout.ms")
    assert f"got {commit}, transaction.timeout.ms is {timeout}" in message
    assert "lower commit.interval.ms or raise transaction.timeout.ms" in message


def test_transaction_timeout_must_not_exceed_its_maximum() -> None:
    message = error_of({**BASE, "transaction.timeout.ms": 900001})
    assert message.startswith("transaction.timeout.ms: must not exceed transaction.max.timeout.ms")
    assert "got 900001, transaction.max.timeout.ms is 900000" in message
    assert "raise transaction.max.timeout.ms" in message
    assert make(transaction_timeout_ms=900000).transaction_timeout_ms == 900000


def test_both_cross_key_problems_are_reported_one_line_each() -> None:
    bad = {"commit.interval.ms": 5000, "transaction.timeout.ms": 5000}
    lines = error_of({**BASE, **bad, "transaction.max.timeout.ms": 4000}).splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "commit.interval.ms",
        "transaction.timeout.ms",
    ]


def test_topics_root_falls_back_to_streams_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("STREAMS_ROOT", str(tmp_path))
    assert StreamsConfig.from_dict({"application.id": "app"}).topics_root == str(tmp_path)
    assert make().topics_root == "/data/topics"  # a source wins over STREAMS_ROOT


def test_missing_topics_root_names_the_key_and_streams_root() -> None:
    message = error_of({"application.id": "app"})
    assert message.startswith("topics.root: missing")
    assert "STREAMS_ROOT" in message


def test_unknown_key_suggests_the_closest_real_key() -> None:
    assert error_of({**BASE, "aplication.id": "x"}) == (
        "aplication.id: unknown configuration key; did you mean application.id?"
    )
    assert error_of({**BASE, "num_partitions": 2}).endswith("did you mean num.partitions?")
    assert error_of({**BASE, "zzz": 1}) == "zzz: unknown configuration key"


def test_every_problem_gets_its_own_line_naming_its_key() -> None:
    bad = {"num.partitions": 0, "auto.offset.reset": "x", "bogus.key": 1}
    lines = error_of({"topics.root": "/t", **bad}).splitlines()
    assert sorted(line.split(":")[0] for line in lines) == sorted(["application.id", *bad])


def test_config_is_frozen() -> None:
    config = make()
    with pytest.raises(ConfigError, match=r"^application\.id: StreamsConfig is frozen"):
        config.application_id = "other"
    with pytest.raises(ConfigError, match="frozen"):
        del config.num_partitions
    assert config.application_id == "app"
    assert config.num_partitions == 1


def test_direct_construction_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^num\.partitions: "):
        StreamsConfig(**{**BASE, "num.partitions": "x"})


def test_get_by_dotted_key_and_round_trip() -> None:
    config = make(num_partitions="4", default_value_serde="JSON")
    assert config.get("num.partitions") == 4
    assert config.get("default.value.serde") == "json"
    with pytest.raises(ConfigError, match=r"did you mean num\.partitions\?"):
        config.get("num.partition")
    assert StreamsConfig.from_dict(config.to_properties()) == config


@pytest.mark.parametrize(
    "serde", ["string", "long", "pkg.module.Name", "pkg.module:Name", "mod:Outer.Inner", "a.B"]
)
def test_serde_accepts_names_and_import_paths_without_importing(serde: str) -> None:
    config = make(default_key_serde=serde, default_value_serde="no_such_pkg.mod:Serde")
    assert config.default_key_serde == serde


@pytest.mark.parametrize("serde", ["Name", "1pkg.Name", "pkg.module:", "pkg.class.Name", "a b.c"])
def test_serde_rejects_malformed_paths(serde: str) -> None:
    assert error_of({**BASE, "default.key.serde": serde}).startswith("default.key.serde: ")


def test_parse_properties_follows_java_syntax() -> None:
    text = (
        "# a comment\n"
        "  ! another comment = not a key\n"
        "\n"
        "application.id = my-app  \n"
        "topics.root: /data/\\\n"
        "      topics\n"
        "state.dir /var/state\n"
        "key\\ with\\ spaces=caf\\u00e9\\tx\\\\y\n"
        "empty=\n"
        "escaped.trailing=a\\ \n"
        "#continued=no \\\n"
        "after.comment=1\r\n"
        "dup=1\ndup=2"
    )
    assert parse_properties(text) == {
        "application.id": "my-app",
        "topics.root": "/data/topics",
        "state.dir": "/var/state",
        "key with spaces": "café\tx\\y",
        "empty": "",
        "escaped.trailing": "a ",
        "after.comment": "1",
        "dup": "2",
    }


def test_parse_properties_rejects_a_malformed_unicode_escape() -> None:
    with pytest.raises(ConfigError, match=r"app\.properties:2: malformed"):
        parse_properties("a=1\nb=\\u12G4", source="app.properties")


def test_from_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "app.properties"
    path.write_text(
        "# streams app\napplication.id=orders\ntopics.root : /data/\\\n  orders\n"
        "processing.guarantee exactly_once_v2\nnum.partitions=\\u0033\n",
        encoding="utf-8",
    )
    config = StreamsConfig.from_properties(path)
    assert (config.application_id, config.topics_root) == ("orders", "/data/orders")
    assert (config.processing_guarantee, config.commit_interval_ms) == ("exactly_once_v2", 100)
    assert config.num_partitions == 3


def test_from_yaml_flat_nested_and_mixed(tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(
        "application.id: orders\n"
        "topics:\n  root: s3://bucket/prefix\n"
        "processing:\n  guarantee: exactly_once_v2\n"
        "num.partitions: 6\n"
        "commit.interval:\n  ms: '250'\n",
        encoding="utf-8",
    )
    config = StreamsConfig.from_yaml(path)
    assert config.topics_root == "s3://bucket/prefix"
    assert config.processing_guarantee == "exactly_once_v2"
    assert (config.num_partitions, config.commit_interval_ms) == (6, 250)


@pytest.mark.parametrize("content", ["- a\n- b\n", "just text\n", "42\n"])
def test_from_yaml_rejects_a_non_mapping_top_level(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.yml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        StreamsConfig.from_yaml(path)


def test_from_yaml_rejects_a_key_given_flat_and_nested(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("num.partitions: 2\nnum:\n  partitions: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^num\.partitions: given twice"):
        StreamsConfig.from_yaml(path)


def test_from_yaml_rejects_a_yaml_boolean_for_an_integer(tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text("application.id: a\ntopics.root: /t\nnum.partitions: yes\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^num\.partitions: must be an integer, not a boolean"):
        StreamsConfig.from_yaml(path)


def test_from_env_maps_names_kafka_docker_style(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMS_CONFIG_APPLICATION_ID", "env-app")
    monkeypatch.setenv("STREAMS_CONFIG_TOPICS_ROOT", "/env/root")
    monkeypatch.setenv("STREAMS_CONFIG_MAX_POLL_RECORDS", "7")
    monkeypatch.setenv("OTHER_MAX_POLL_RECORDS", "8")
    config = StreamsConfig.from_env()
    assert (config.application_id, config.topics_root, config.max_poll_records) == (
        "env-app",
        "/env/root",
        7,
    )


def test_from_env_maps_double_and_triple_underscores() -> None:
    environ = {"STREAMS_CONFIG_" + k.upper().replace(".", "_"): v for k, v in BASE.items()}
    environ["STREAMS_CONFIG_MY__ODD___KEY"] = "1"
    with pytest.raises(ConfigError, match=r"^my_odd-key: unknown configuration key"):
        StreamsConfig.from_env(environ)
    del environ["STREAMS_CONFIG_MY__ODD___KEY"]
    assert StreamsConfig.from_env(environ).application_id == "app"


def test_load_merges_sources_then_env_then_overrides(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    properties = tmp_path / "base.properties"
    properties.write_text(
        "application.id=base\ntopics.root=/base\nnum.partitions=2\nnum.stream.threads=2\n"
    )
    yaml_file = tmp_path / "site.YML"
    yaml_file.write_text("num:\n  partitions: 3\n  stream.threads: 3\nmax.poll.records: 3\n")
    monkeypatch.setenv("STREAMS_CONFIG_NUM_STREAM_THREADS", "4")
    monkeypatch.setenv("STREAMS_CONFIG_MAX_POLL_RECORDS", "4")
    config = StreamsConfig.load(
        properties, str(yaml_file), {"topics.root": "/mapped"}, overrides={"max.poll.records": 5}
    )
    assert config.application_id == "base"  # only the first source sets it
    assert config.topics_root == "/mapped"  # a later source wins
    assert config.num_partitions == 3  # YAML after properties
    assert config.num_stream_threads == 4  # env after the sources
    assert config.max_poll_records == 5  # overrides last
    assert StreamsConfig.load(properties, yaml_file, env=False).num_stream_threads == 3


def test_load_rejects_an_unknown_file_suffix(tmp_path: Path) -> None:
    path = tmp_path / "app.json"
    path.write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"app\.json: unsupported .*\.properties, \.yaml, \.yml"):
        StreamsConfig.load(path, BASE)


def test_missing_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.properties: cannot read"):
        StreamsConfig.load(tmp_path / "missing.properties")


def _documented_defaults() -> dict[str, str]:
    """Return the ``#key=value`` lines of the shipped defaults file."""
    lines = DEFAULTS_FILE.read_text(encoding="utf-8").splitlines()
    found: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = re.fullmatch(r"#([a-z][a-z0-9.]*)=(.*)", line)
        if match:
            assert match.group(1) not in found, f"{match.group(1)} listed twice"
            assert lines[index - 1].startswith("# "), f"{match.group(1)} has no comment"
            found[match.group(1)] = match.group(2)
    return found


def test_defaults_file_matches_the_model() -> None:
    documented = _documented_defaults()
    aliases = {field.alias for field in StreamsConfig.model_fields.values()}
    assert set(documented) == aliases
    # required keys, state.dir whose default depends on the platform, and keys whose default
    # is the empty string are left empty
    assert {key for key, value in documented.items() if not value} == {
        "application.id",
        "topics.root",
        "state.dir",
        "rocksdb.config.setter",
        "errors.dead.letter.queue.topic.name",
        "storage.options",
        "checkpoint.location",
    }
    defaults = make().to_properties()
    assert defaults["state.dir"] == os.path.join(tempfile.gettempdir(), "spark-streams-eos")
    for key, value in documented.items():
        if value:
            assert value == defaults[key], key


def test_defaults_file_sets_nothing_when_loaded_as_is() -> None:
    assert parse_properties(DEFAULTS_FILE.read_text(encoding="utf-8")) == {}
    config = StreamsConfig.load(DEFAULTS_FILE, BASE)
    assert config == make()
