"""The resilience layer: what makes every S3 operation end, between the transport and the S3 operations.

``deadline`` (event-loop timers per attempt phase), ``retryable`` (the one table of what is retried), ``retry_budget``
(a client-wide token bucket), ``slots`` (attempt slots: queue here, not inside the pool) and ``attempt`` (the
``AttemptRunner`` that composes them around each operation).
"""
