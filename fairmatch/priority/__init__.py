"""Priorities: group shares and the policies that turn them into task-queue priorities. Pure logic."""
