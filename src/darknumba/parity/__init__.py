"""Checking against a C darknet build: the shim, running it, tensor differences."""
