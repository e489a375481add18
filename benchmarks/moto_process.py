"""Child process: moto's S3 server (``moto.server`` main), quieter and tied to the benchmark's life.

Run as ``python -m benchmarks.moto_process PARENT_PID -H 127.0.0.1 -p PORT``. The per-request werkzeug
access log is switched off: it costs the server CPU on the two cores the client also uses.
"""

from __future__ import annotations

import logging
import sys

from benchmarks.lifetime import die_with_parent


def main(argv: list[str]) -> None:
    """Start moto's server with the remaining arguments (blocks until terminated)."""
    die_with_parent(int(argv[0]))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    from moto.server import main as moto_main

    moto_main(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
