"""Self-tests of the studies in ``tools.studies``: synthetic windows and the committed results under docs/results."""
