"""Task queues: requirement normalisation, CPU buckets and their SQL."""
