"""The studies: each a command, ``python -m tools.studies.NAME --help`` from the repository root (``ab_rejudge``
judges stored windows again: an A/B of builds, or a live group's contrasts). Nothing here is product."""
