"""Self-tests of the Ceph RGW harness: a cluster that does not come up in time fails with the daemons' logs and
leaves no process and no directory behind. (That it serves S3 is what test_store_conformance.py runs on.)"""

from __future__ import annotations

import pytest

from testbed.processes import alive
from testbed.rgw import CephRgw, RgwUnavailable, unavailable_reason

pytestmark = pytest.mark.timeout(120)


def test_a_cluster_that_is_not_up_in_time_fails_with_its_logs_and_leaves_nothing_behind() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    rgw = CephRgw(start_timeout=0.5)
    with pytest.raises(RgwUnavailable) as failed:
        rgw.start()
    message = str(failed.value)
    assert "waited 0.5 s for " in message and "in vain" in message
    assert "--- mon.a.log (last 3000 bytes) ---" in message  # the daemons' log tails come with the error
    assert rgw.started_pids and not [pid for pid in rgw.started_pids if alive(pid)]
    assert rgw.workdir is not None and not rgw.workdir.exists()
