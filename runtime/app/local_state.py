"""Local state left from before a rewind is dropped at the next start (and where the
application's shutdown request lives).

A rewind (:mod:`runtime.app.rewind`) puts the changelogs back to a cut, and the offsets
after the cut are written again: a store kept on a machine from before the rewind would
look caught up once the changelog grew past its offset again. The rewind leaves its id
in ``_apps/<application.id>/rewound.json``; an instance that starts compares it with
``<state.dir>/<application.id>/rewound`` and, when they differ, deletes its task
directories (the driver's and its local executors'), keeping its process id, then
records the id. Its stores are then restored from the snapshots and changelogs of the cut.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil

from runtime.storage.topics import TopicAdmin
from statestores.state_directory import StateDirectory

log = logging.getLogger(__name__)

LOCAL_MARKER = "rewound"


def shutdown_marker(admin: TopicAdmin, application_id: str) -> str:
    """The file whose presence asks every instance of the application to stop."""
    return admin.root.path("_apps", application_id, "shutdown-requested")


def forget_rewound_state(admin: TopicAdmin, state_dir: str, application_id: str) -> int:
    """Drop this machine's task directories of ``application_id`` when the application
    was rewound since they were written; return how many went."""
    raw = admin.root.read_bytes(admin.root.path("_apps", application_id, "rewound.json"))
    if raw is None:
        return 0
    rewind_id = str(json.loads(raw)["id"])
    app_dir = os.path.join(os.path.abspath(state_dir), application_id)
    marker = os.path.join(app_dir, LOCAL_MARKER)
    try:
        with open(marker, encoding="utf-8") as f:
            if f.read().strip() == rewind_id:
                return 0
    except FileNotFoundError:
        pass
    dropped = 0
    bases = [os.path.abspath(state_dir), *glob.glob(os.path.join(state_dir, "executor-*"))]
    for base in bases:
        directory = StateDirectory(base, application_id)
        for task_id in directory.task_ids():
            shutil.rmtree(os.path.join(directory.app_dir, task_id), ignore_errors=True)
            dropped += 1
    os.makedirs(app_dir, exist_ok=True)
    with open(marker, "w", encoding="utf-8") as f:
        f.write(rewind_id)
    if dropped:
        log.warning(
            "[app %s] rewound (rewind %s) since this machine last ran it: dropped %d local "
            "task directories; their stores restore from the cut",
            application_id,
            rewind_id,
            dropped,
        )
    return dropped
