"""Matching: resource descriptions, eligibility, the lottery and the claim."""
