"""Differential CPU profiles of the engine's roles with py-spy (issue 22): *where* the time went.

One module per concern:

- ``model``: ``Frame`` (function, file, line), ``Profile`` (one role's collapsed stacks over one window with
  its rate and completed requests: CPU-s per request by function, self and total), ``RoleProfiles``.
- ``record``: ``py-spy record --format raw`` per role process, all roles in parallel; the parser of collapsed
  stacks; ``Refusal`` where py-spy cannot attach (missing binary, no ptrace permission), never an error.
- ``diff``: candidate minus reference CPU-s per request per function, ranked by growth with its share of the
  change (``RoleDiff``, ``differential``).
- ``render``: top 3 for the failure message, top 10 per role for summary.md.
- ``figure``: the differential icicle (matplotlib, PNG) for the HTML report.
- ``store``: a profile kept beside a baseline pool (history mode).
- ``engine``: the GPU tier's entry points for the engine runner (``profile_engine``, ``ab_differential``,
  ``history_differential``).
- ``cpu_tier``: the CPU tier: the cpu_tier producer profiled in dedicated rounds after the verdicts.
- ``report``: the session's profile section (stash key, summary.md lines, HTML images).
"""
