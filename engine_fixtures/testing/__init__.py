"""Stand-ins the suite's own self-tests start (like pytest's ``_pytest/pytester.py``), never product code.

- ``stub_engine``: SGLang's process titles and HTTP surface, for the engine fixture's CPU self-tests.
- ``stub_server`` / ``stub_process``: a zero-work streaming chat server for the load generator's self-tests
  and ``testing.bench_vs_sglang``, and the context manager that runs it (``Supervised``).
- ``proc_tree``: a process tree shaped like SGLang's, for the supervisor's and role map's tests.
- ``postgres``: a throwaway PostgreSQL server from the distribution's binaries, for the run history's tests (a
  real server, not a stand-in; ``.ci/run`` starts it too).
"""
