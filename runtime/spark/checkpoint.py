"""Where Spark keeps an application's query checkpoints."""

from __future__ import annotations

import logging
import os
import shutil

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.storage.fs import StorageRoot

log = logging.getLogger(__name__)


def checkpoint_location(config: StreamsConfig, root: StorageRoot) -> str:
    """Return where Spark keeps the application's query checkpoints: under
    ``checkpoint.location`` when set, else under the storage root when it is a local path,
    else under ``state.dir`` (Spark cannot write an object store without its Hadoop
    connector). The stream threads' checkpoints are disposable; the DataFrame sources'
    (``<location>/sources/<topic>``) hold their read positions and are kept."""
    configured = config.checkpoint_location
    if configured:
        return f"{configured.rstrip('/')}/{config.application_id}"
    if root.is_local:
        return root.uri_of("_apps", config.application_id, "checkpoint")
    state_dir = os.path.abspath(config.state_dir)
    return os.path.join(state_dir, config.application_id, "spark-checkpoint")


def clear_checkpoint(location: str) -> None:
    """Delete the checkpoint at ``location`` (a local path, or a URI pyarrow reaches)."""
    if "://" not in location or location.startswith("file://"):
        shutil.rmtree(location.removeprefix("file://"), ignore_errors=True)
        return
    try:
        root = StorageRoot(location)
        root.delete_dir(root.base)
    except StreamsError as exc:  # a URI pyarrow cannot reach: Spark's own is used as is
        log.info("could not clear the Spark checkpoint %s: %s", location, exc)
