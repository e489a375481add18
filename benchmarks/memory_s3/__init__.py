"""An in-memory S3 endpoint for benchmarks: buckets and key order (`store`), S3's documents (`documents`), the
operations (`operations`), and HTTP/1.1 on asyncio (`wire`). `benchmarks/object_server.py` runs it as a process."""
