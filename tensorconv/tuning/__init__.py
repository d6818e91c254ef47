"""Tile selection: analytic performance models, exhaustive (oracle) tuners, a tune cache."""
