"""The application instance's process id, kept in its state directory across restarts.

Kafka Streams persists a random UUID in ``state.dir/<application.id>/
kafka-streams-process-metadata``; here too, so the transactional ids of its stream threads
(``<application.id>-<processId>-<threadIndex>``) survive restarts and a restarted instance
fences the one it replaces.
"""

from __future__ import annotations

import errno
import json
import os
import uuid

from common.errors import ConfigError, StreamsError

PROCESS_FILE = "streams-process-metadata"


def load_or_create_process_id(state_dir: str, application_id: str) -> str:
    """Return the process id stored for ``application_id`` under ``state_dir``, creating it.

    Raises:
        StreamsError: the file exists but cannot be read (it names the file to delete).
        ConfigError: ``state.dir`` cannot be written (named with its key).
    """
    app_dir = os.path.join(state_dir, application_id)
    path = os.path.join(app_dir, PROCESS_FILE)
    try:
        os.makedirs(app_dir, exist_ok=True)
        return _load_or_create(state_dir, application_id, path)
    except PermissionError as exc:
        raise ConfigError(
            f"state.dir: cannot write {exc.filename or app_dir} (permission denied); choose "
            "a directory this user can write (--config state.dir=PATH)"
        ) from exc
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.ENOSPC, errno.ENOTDIR, errno.EEXIST):
            raise ConfigError(
                f"state.dir: cannot write {exc.filename or app_dir} ({exc.strerror}); choose "
                "a writable directory (--config state.dir=PATH)"
            ) from exc
        raise


def _load_or_create(state_dir: str, application_id: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return str(uuid.UUID(data["processId"]))
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError) as exc:
        raise StreamsError(
            f"the process metadata file {path} is unreadable ({exc}); delete it to give this "
            "instance a new process id (its transactional ids change with it)"
        ) from exc
    process_id = str(uuid.uuid4())
    tmp = f"{path}.{process_id}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"version": 1, "processId": process_id}, f)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # first writer wins if two start at once
    except FileExistsError:
        os.unlink(tmp)
        return _load_or_create(state_dir, application_id, path)
    os.unlink(tmp)
    return process_id
