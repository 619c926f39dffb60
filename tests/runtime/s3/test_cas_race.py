"""Processes racing on one compare-and-swap log on S3 (an S3-compatible server started by
the test): the delta backend appends with the store's conditional writes (put-if-absent),
so exactly one writer wins each version."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from runtime.storage.fs import StorageRoot
from runtime.txn.cas_log import CasLog
from tests.runtime.txn.test_cas_log import run_racers
from tests.s3server import S3Server

RACER = textwrap.dedent(
    """
    import json, os, sys, time
    from runtime.storage.fs import StorageRoot, register_storage_options
    from runtime.txn.cas_log import CasLog
    from common.errors import CoordinatorError

    root, options, sync, writer, rounds = sys.argv[1:5] + [int(sys.argv[5])]
    register_storage_options(root, json.loads(options))
    log = CasLog(StorageRoot(root), ("race",), keep=1000)
    open(os.path.join(sync, f"ready-{writer}"), "w").close()
    while not os.path.exists(os.path.join(sync, "go")):
        time.sleep(0.001)
    won, losses, errors = [], 0, 0
    while len(won) < rounds:
        try:
            latest = log.read_latest()
            version, counter = (-1, -1) if latest is None else (latest[0], latest[1]["counter"])
            if log.append(version, {"counter": counter + 1, "writer": writer}):
                won.append(version + 1)
            else:
                losses += 1
        except CoordinatorError:
            errors += 1
    print(json.dumps({"won": won, "losses": losses, "errors": errors}))
    """
)


@pytest.mark.slow  # 30 s; the default suite runs an application on S3 (test_app_on_s3)
def test_racing_processes_win_each_version_once_on_s3(
    s3_server: S3Server, s3_root: str, tmp_path: Path
) -> None:
    writers, rounds = 4, 25
    options = json.dumps(s3_server.options())
    argv = [[s3_root, options, str(tmp_path), str(w), str(rounds)] for w in range(writers)]
    results = run_racers(RACER, tmp_path, argv)
    losses = sum(r["losses"] for r in results)
    print(f"\n{writers * rounds} appends on S3, {losses} lost races")
    assert losses > 0  # the writers really raced
    won = [v for r in results for v in r["won"]]
    assert len(won) == len(set(won)) == writers * rounds  # no version won twice

    log = CasLog(StorageRoot(s3_root), ("race",), keep=1000)
    latest = log.read_latest()
    assert latest is not None and latest[1]["counter"] == writers * rounds - 1
    # each version a writer won holds that writer's document, and the counters never skip
    for writer, result in enumerate(results):
        for version in result["won"]:
            document = log._log.document(version)  # the stored version itself
            assert isinstance(document, dict) and document["writer"] == str(writer), version
