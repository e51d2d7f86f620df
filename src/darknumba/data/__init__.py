"""Datasets: .data/list/label files and their checks, the loader, example datasets, weight downloads."""
