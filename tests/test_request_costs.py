"""What every request pays, counted in Python frames (not timed): the per-request reads of the policy run no Python
frame, signing runs its own and one-shot HMAC's once the day's key is made, a same-ETag comparison copies nothing, and
a window of a scattered GET's pieces is cut without rebuilding them (issue 39: s3io's CPU per small GET)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from s3io import Policy
from s3io.s3.etags import same_etag
from s3io.scatter import Pieces
from s3io.transport.sigv4 import EMPTY_SHA256, Signer


def _python_frames(work: Callable[[], Any]) -> Counter[str]:
    """The Python functions ``work()`` entered (C calls are not frames), by name, counted while it runs."""
    entered: Counter[str] = Counter()

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            entered[frame.f_code.co_name] += 1

    sys.setprofile(watch)
    try:
        work()
    finally:
        sys.setprofile(None)
    return +entered


def test_reading_a_flat_policy_setting_runs_no_python_frame() -> None:
    policy = Policy()
    frames = _python_frames(
        lambda: (policy.stall_timeout, policy.first_byte_timeout, policy.connect_timeout, policy.operation_timeout)
    )
    assert frames == Counter({"<lambda>": 1}), frames  # the lambda above only: each read is C's attribute getter


def test_signing_runs_no_hmac_object_once_the_day_key_is_made() -> None:
    signer = Signer("AKIDEXAMPLE", "secret", None, "us-east-1")
    now = 1_700_000_000.0
    signer.sign("GET", "/b/k", "", {"host": "h"}, EMPTY_SHA256, now=now)  # the day's key, made once
    frames = _python_frames(lambda: signer.sign("GET", "/b/k", "", {"host": "h"}, EMPTY_SHA256, now=now + 1))
    del frames["<listcomp>"]  # the canonical headers' comprehension: a frame of its own before Python 3.12 only
    assert frames == Counter({"<lambda>": 1, "sign": 1, "_signing_key": 1, "digest": 1}), frames


def test_same_etag_of_one_string_strips_nothing() -> None:
    etag = '"0123456789abcdef0123456789abcdef"'
    frames = _python_frames(lambda: same_etag(etag, etag))
    assert frames == Counter({"<lambda>": 1, "same_etag": 1}), frames
    assert same_etag('W/"abc"', '"abc"') and not same_etag('"abc"', '"abd"') and not same_etag(None, None)


def test_a_window_of_pieces_is_cut_without_rebuilding_them() -> None:
    kept = [(4096 * i, memoryview(bytearray(1024))) for i in range(8)]
    pieces = Pieces.of_runs(0, 4096 * 8, kept)
    frames = _python_frames(lambda: pieces[100:20_000])
    assert frames == Counter({"<lambda>": 1, "__getitem__": 1, "_made": 1}), frames
    window = pieces[100:20_000]
    assert len(window) == 19_900 == sum(len(view) for view in window.views)
