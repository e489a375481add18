"""s3io: a resilient S3 range-read engine."""
