"""Benchmarks for s3io against its peers, on a local moto server behind a keep-alive proxy.

Run ``python -m benchmarks.run [--only NAME] [--quick]``; results land in ``benchmarks/RESULTS.md``, each
table with the command that produced it.
"""
