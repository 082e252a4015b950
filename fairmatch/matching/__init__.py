"""Matching: resource descriptions, the catalog of task queues, eligibility, choice and the lottery. Pure logic."""
