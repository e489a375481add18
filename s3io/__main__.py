"""``python -m s3io``: the same command line as the ``s3io`` script (s3io.cli)."""

from s3io.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
