"""Priorities: groups and their shares."""
