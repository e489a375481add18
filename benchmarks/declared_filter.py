"""Requests a partition-filtered s3parquet read makes over 30 daily partitions, with and without ``filter``.

``python -m benchmarks.declared_filter`` uploads 30 ``day=`` partitions of 2 files each to moto (behind the strict
SigV4 front), reads them through the counting proxy (testbed/faultproxy.py) in a local Spark session, once
with ``.option("filter", "day = '2026-01-15'")`` and once with Spark's own ``.filter(...)`` (which PySpark 4.3 does
not push into a Python source), each with ``columns`` and without, and prints the LISTs, the GETs of data files and
the files they touched. Traffic stays on loopback.
"""

from __future__ import annotations

import io
import sys
from collections import Counter
from datetime import date, timedelta
from typing import Any
from urllib.parse import parse_qs, unquote

DAYS = [date(2026, 1, 1) + timedelta(days=i) for i in range(30)]
CONDITION = "day = '2026-01-15'"


def main() -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_ext.session import local_session
    from testbed.faultproxy import FaultProxy
    from testbed.moto_server import MotoServer, boto3_client, fake_aws_environment

    with fake_aws_environment():
        moto = MotoServer()
        endpoint = moto.start()
        spark = local_session("local[2]", "declared-filter")
        try:
            client = boto3_client(endpoint.url)
            client.create_bucket(Bucket="daily")
            for n, day in enumerate(DAYS):
                for part in range(2):
                    sink = io.BytesIO()
                    ids = range((2 * n + part) * 100, (2 * n + part + 1) * 100)
                    pq.write_table(pa.table({"id": list(ids), "amount": [float(i % 10) for i in ids]}), sink)
                    client.put_object(Bucket="daily", Key=f"t/day={day}/part-{part}.parquet", Body=sink.getvalue())
            print("| read | rows | LISTs | GETs of data files | files read |")
            print("| --- | --- | --- | --- | --- |")
            with FaultProxy(endpoint.url) as proxy:
                for label, build in _reads(spark, proxy.url):
                    proxy.reset_log()
                    rows = build().count()
                    print(_row(label, rows, proxy.requests))
        finally:
            spark.stop()
            moto.stop()
    return 0


def _reads(spark: Any, url: str) -> list[tuple[str, Any]]:
    def reader(**options: str) -> Any:
        r = spark.read.format("s3parquet").option("endpoint", url)
        for key, value in options.items():
            r = r.option(key, value)
        return r

    path = "s3://daily/t/"
    return [
        ("no filter", lambda: reader().load(path)),
        (f'Spark `.filter("{CONDITION}")`', lambda: reader().load(path).filter(CONDITION)),
        (f'`.option("filter", "{CONDITION}")`', lambda: reader(filter=CONDITION).load(path)),
        (
            f'`.option("filter", "{CONDITION} AND amount > 5")` + `columns=id`',
            lambda: reader(filter=f"{CONDITION} AND amount > 5", columns="id").load(path),
        ),
    ]


def _row(label: str, rows: int, requests: list[Any]) -> str:
    lists = [r for r in requests if "list-type" in r.query]
    gets = [unquote(r.path) for r in requests if r.method == "GET" and "list-type" not in r.query]
    days = Counter(p.split("day=", 1)[1].split("/", 1)[0] for p in gets if "day=" in p)
    prefixes = {parse_qs(r.query).get("prefix", [""])[0] for r in lists}
    return (
        f"| {label} | {rows} | {len(lists)} ({len(prefixes)} prefixes) | {len(gets)} | "
        f"{len(set(gets))} in {len(days)} day(s) |"
    )


if __name__ == "__main__":
    sys.exit(main())
