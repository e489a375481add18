"""S3's XML answers parsed into typed values (no server)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(30)


def test_a_truncated_uploads_page_gives_the_markers_of_the_next() -> None:
    from s3io.s3.xml import parse_uploads_page

    page = b"""<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>b</Bucket><NextKeyMarker>up/1.bin</NextKeyMarker><NextUploadIdMarker>id-1</NextUploadIdMarker>
  <MaxUploads>2</MaxUploads><IsTruncated>true</IsTruncated>
  <Upload><Key>up/0.bin</Key><UploadId>id-0</UploadId><Initiated>2026-11-21T10:00:00.000Z</Initiated></Upload>
  <Upload><Key>up/1.bin</Key><UploadId>id-1</UploadId><Initiated>2026-11-21T10:00:01.000Z</Initiated></Upload>
</ListMultipartUploadsResult>"""
    uploads, markers = parse_uploads_page("b", page)
    assert [(u.key, u.upload_id) for u in uploads] == [("up/0.bin", "id-0"), ("up/1.bin", "id-1")]
    assert markers == ("up/1.bin", "id-1")
    assert uploads[1].initiated is not None and uploads[1].initiated - uploads[0].initiated == 1.0
    last, none = parse_uploads_page("b", page.replace(b"<IsTruncated>true", b"<IsTruncated>false"))
    assert none is None and len(last) == 2
