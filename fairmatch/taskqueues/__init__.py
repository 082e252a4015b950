"""Task queues: requirement normalisation, CPU buckets, level counts, the change signal. Pure logic."""
