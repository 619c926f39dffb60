"""``python -m streams.crash.s3serve PORT``: moto's S3 on its own (the ``dev`` extra).

moto's own server (``python -m moto.server``) finds the service of every request among all
of AWS's under one lock, which takes most of its time once two instances, their log
cleaners and group heartbeats share it; this serves S3 only, the way a test or a campaign
uses it (path-style requests on ``http://127.0.0.1:PORT``), without request logs.
"""

from __future__ import annotations

import logging
import sys

from moto.moto_server.werkzeug_app import MotoRequestHandler, create_backend_app
from werkzeug.serving import run_simple


def main(argv: list[str]) -> None:
    """Serve S3 on ``127.0.0.1:argv[0]`` until killed."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    run_simple(
        "127.0.0.1",
        int(argv[0]),
        create_backend_app("s3"),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
