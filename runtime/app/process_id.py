"""The application instance's process id, kept in its state directory across restarts.

Kafka Streams persists a random UUID in ``state.dir/<application.id>/
kafka-streams-process-metadata``; here too, so the transactional ids of its stream threads
(``<application.id>-<processId>-<threadIndex>``) survive restarts and a restarted instance
fences the one it replaces.

As Kafka's ``StateDirectory`` does, a running instance holds an exclusive ``flock`` on
``state.dir/<application.id>/.lock`` (:func:`claim_state_dir`): a second instance started on
the same state directory while the first still lives (paused, say: a stopped process, a
frozen VM) is refused at once, before it would share the first one's process id, stores
and query checkpoints. The lock dies with its process, so a killed instance's successor
starts.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import uuid

from common.errors import ConfigError, StreamsError

PROCESS_FILE = "streams-process-metadata"
LOCK_FILE = ".lock"
#: The application directories this process holds locked -> (the lock file's descriptor,
#: the holder: its instance).
_HELD: dict[str, tuple[int, int]] = {}


class StateDirectoryInUseError(StreamsError):
    """Another live instance of the application uses this state directory."""


def claim_state_dir(state_dir: str, application_id: str, holder: object) -> str:
    """Lock the application's directory under ``state_dir`` for ``holder`` (an instance:
    until :func:`release_state_dir` or the process's end) and return its process id.

    Raises:
        StateDirectoryInUseError: another instance holds the lock (named, with its pid).
        StreamsError, ConfigError: as :func:`load_or_create_process_id`.
    """
    process_id = load_or_create_process_id(state_dir, application_id)
    app_dir = os.path.abspath(os.path.join(state_dir, application_id))
    if app_dir in _HELD:
        raise StateDirectoryInUseError(_in_use(app_dir, application_id, str(os.getpid())))
    fd = os.open(os.path.join(app_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StateDirectoryInUseError(_in_use(app_dir, application_id, holder)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[app_dir] = (fd, id(holder))
    return process_id


def release_state_dir(state_dir: str, application_id: str, holder: object) -> None:
    """Release ``holder``'s :func:`claim_state_dir` lock (nothing when it holds none)."""
    app_dir = os.path.abspath(os.path.join(state_dir, application_id))
    held = _HELD.get(app_dir)
    if held is not None and held[1] == id(holder):
        del _HELD[app_dir]
        fcntl.flock(held[0], fcntl.LOCK_UN)
        os.close(held[0])


def _in_use(app_dir: str, application_id: str, holder: str) -> str:
    return (
        f"state.dir: {app_dir} is in use by another running instance of application "
        f"{application_id!r} (process {holder} holds {LOCK_FILE}); two instances cannot share "
        "a state directory: stop that one first, or give this one its own "
        "(--config state.dir=PATH)"
    )


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
