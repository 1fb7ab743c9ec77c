"""The pytest session: settings resolved once (``settings``), the session object that writes the results and
reports (``perf_session``), the recorder that ends a test by its verdicts (``recorder``), the run guard (machine
lock, sweep, run registry: ``run_guard``), the scenario registry (``registry``), the GPU tier's fixture object
(``gpu_tier``, over ``scenarios.runner``), markers and skip reasons (``marks``), failure sections (``sections``)
and the engine fixture's parameters (``params``). The only package that imports pytest; nothing below it does."""
