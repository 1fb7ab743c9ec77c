"""A stub with SGLang's process titles and HTTP surface, for the engine fixture's CPU self-tests only.

It parses the flags ``EngineSpec.argv`` produces (argparse exits 2 on an unknown flag, like SGLang),
spawns children titled like SGLang's (``sglang::scheduler[_PP<p>][_TP<t>]`` per rank and
``sglang::detokenizer``; they exit when the parent's pipe closes), and serves ``/health``,
``/server_info`` (0.5.16 layout: the resolved PP cap only in ``internal_states[0]``), ``/metrics``
(prometheus_client), ``/flush_cache`` and streaming ``/v1/chat/completions``. Requests beyond
``--max-running-requests`` queue, as in SGLang, and so do requests beyond the PP micro-batch cap (the stub runs one
micro-batch: its running requests never exceed ``max_running_requests // pp`` unless ``--pp-max-micro-batch-size``).

The scheduler children run the decode steps (``support.stub_scheduler``, SGLang's ``Scheduler.run_batch`` signature):
one step per token time over the requests running then, sent to every scheduler child, so the plugin's running-batch
probe counts the stub's running requests in every rank as it counts SGLang's (``PERF_ARMS_SCHEDULER_MODULE``).

Failure modes for the tests (``--stub-mode``):
- ``crash-before-ready``: exits 3 during "model load" with a CUDA OOM message;
- ``never-ready``: starts its children, never serves;
- ``slow-start``: serves only after ``--stub-start-s`` seconds (a model load slower than the deadline);
- ``crash-mid-load``: the first chat request gets one token, then the server exits 70 (a scheduler crash);
- ``ignore-sigterm``: ignores SIGTERM (a shutdown that hangs), so only SIGKILL stops it.
``--stub-shm-mb N`` allocates (``posix_fallocate``) and maps an SGLang-named ``sgl_shm_*`` segment of N MiB for
the server's lifetime, unlinked on a clean exit: a SIGKILLed stub leaves it, as SGLang does; a /dev/shm too full
for it stops the start with ENOSPC.

The copy path (``--stub-image-kb N``, N > 0): every chat request first wraps an N KiB tensor in the stand-in
``support.stub_copy.ShmPointerMMData`` on the event loop, as SGLang's tokenizer manager wraps each image, and the
stub tells the suite's SGLang plugin to take the class from there (``PERF_ARMS_SHM_MODULE``, inherited by the
children), so the plugin's live copy arms and thread cap run on it and are proved end to end. The copied bytes are
checked (a corrupted copy answers 500). The request's service time depends on the code that copied, by a fixed,
documented amount: a request whose copy ran the torch copy lines (SGLang's own code, the ``stock`` and ``torch``
arms) waits ``--stub-torch-copy-ms`` more (default: the ``STUB_TORCH_COPY_MS`` environment variable, else 0) before
its first token than one whose copy ran the buffer assignment, so a live contrast of the two arms has a known sign.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import mmap
import multiprocessing as mp
import os
import secrets
import signal
import sys
import time
from importlib import metadata
from pathlib import Path

DEFAULT_MAX_RUNNING = 64
MODES = ("ok", "crash-before-ready", "never-ready", "slow-start", "crash-mid-load", "ignore-sigterm")


def _load_plugins() -> None:
    """What SGLang's ``load_plugins()`` does: call every ``sglang.srt.plugins`` entry point."""
    if os.environ.get("PERF_ARMS_PROOF_DIR"):
        for ep in metadata.entry_points(group="sglang.srt.plugins"):
            ep.load()()


def child(title: str, conn: mp.connection.Connection) -> None:
    import setproctitle

    setproctitle.setproctitle(title)
    if title.startswith("sglang::scheduler"):
        from perf_tests.support import stub_scheduler  # imported before the plugins load, as SGLang's is

        _load_plugins()
        conn.send("up")
        stub_scheduler.serve(conn)  # the decode steps the server sends, until its end of the pipe closes
        return
    _load_plugins()
    conn.send("up")
    with contextlib.suppress(EOFError):
        conn.recv()  # blocks until the parent sends or dies (EOF)


def scheduler_titles(pp: int, tp: int) -> list[str]:
    """SGLang's scheduler titles: ``sglang::scheduler[_PP<p>][_TP<t>]`` (suffixes only when size > 1)."""
    return [
        "sglang::scheduler" + (f"_PP{p}" if pp > 1 else "") + (f"_TP{t}" if tp > 1 else "")
        for p in range(pp)
        for t in range(tp)
    ]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="stub_engine")
    p.add_argument("--model-path", required=True, type=Path)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    for flag in (
        "--load-format",
        "--attention-backend",
        "--mm-attention-backend",
        "--sampling-backend",
        "--grammar-backend",
        "--mm-feature-transport",
        "--cuda-graph-max-bs",
    ):
        p.add_argument(flag)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--pp-size", type=int, default=1)
    p.add_argument("--pp-max-micro-batch-size", type=int, default=None)
    p.add_argument("--pp-async-batch-depth", type=int, default=0)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--mm-preprocess-cache-size-mb", type=int)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--stub-mode", choices=MODES, default="ok")
    p.add_argument("--stub-token-ms", type=float, default=2.0)
    p.add_argument("--stub-start-s", type=float, default=30.0)
    p.add_argument("--stub-shm-mb", type=int, default=0)
    p.add_argument("--stub-image-kb", type=int, default=0)
    p.add_argument("--stub-kv-short", type=int, default=0, help="report a KV pool this many tokens smaller")
    p.add_argument("--stub-torch-copy-ms", type=float, default=float(os.environ.get("STUB_TORCH_COPY_MS", "0")))
    return p.parse_args(argv)


class Stub:
    def __init__(self, a: argparse.Namespace, schedulers: list[mp.connection.Connection] | None = None) -> None:
        from prometheus_client import CollectorRegistry, Gauge, Histogram

        self.a = a
        self.schedulers = list(schedulers or ())  # the pipes to the scheduler-titled children: one decode step each
        self.max_running = a.max_running_requests or DEFAULT_MAX_RUNNING
        self.pp_cap = a.pp_max_micro_batch_size or max(self.max_running // a.pp_size, 1)
        self.cap = min(self.max_running, self.pp_cap)
        self.slots = asyncio.Semaphore(self.cap)
        self.running = 0
        self.queued = 0
        self.reg = CollectorRegistry()
        labels = {"model_name": "stub", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
        self.g_running = Gauge("sglang:num_running_reqs", "running", list(labels), registry=self.reg)
        self.g_queue = Gauge("sglang:num_queue_reqs", "queued", list(labels), registry=self.reg)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "ttft",
            ["model_name"],
            registry=self.reg,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
        )
        self.g_running_l = self.g_running.labels(**labels)
        self.g_queue_l = self.g_queue.labels(**labels)
        self.ttft_l = self.ttft.labels(model_name="stub")  # exported (at zero) before the first request
        self.image = None
        if a.stub_image_kb > 0:
            import torch

            self.image = torch.randint(0, 256, (a.stub_image_kb * 1024,), dtype=torch.uint8,
                                       generator=torch.Generator().manual_seed(a.stub_image_kb))

    async def copy_image(self) -> bool:
        """The copy path (module docstring): False when the copied bytes differ from the image."""
        import torch

        from perf_tests.support.stub_copy import copied_with_torch

        obj, with_torch = copied_with_torch(self.image)
        intact = torch.equal(torch.frombuffer(obj.shm.buf, dtype=torch.uint8), self.image)
        if with_torch and self.a.stub_torch_copy_ms > 0:
            await asyncio.sleep(self.a.stub_torch_copy_ms / 1000.0)  # the documented cost of the torch copy
        return intact

    async def decode_steps(self, _app: object):  # type: ignore[no-untyped-def]
        """While the server runs: one decode step per token time (at least 1 ms) over the requests running then,
        sent to every scheduler child (each TP and PP rank runs the same batch, as SGLang's do)."""
        async def steps() -> None:
            while True:
                await asyncio.sleep(max(self.a.stub_token_ms, 1.0) / 1000.0)  # the stub's stand-in for a step
                if self.running:
                    for conn in list(self.schedulers):
                        try:
                            conn.send(self.running)
                        except OSError:  # a child that is gone runs no more steps
                            self.schedulers.remove(conn)

        task = asyncio.create_task(steps())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def server_info(self) -> dict[str, object]:
        a = self.a
        args = {
            "model_path": str(a.model_path),
            "tp_size": a.tp_size,
            "pp_size": a.pp_size,
            "dp_size": 1,
            "max_running_requests": a.max_running_requests,
            "pp_max_micro_batch_size": a.pp_max_micro_batch_size,
            "pp_async_batch_depth": a.pp_async_batch_depth,
            "mm_feature_transport": a.mm_feature_transport,
            "disable_radix_cache": a.disable_radix_cache,
            "enable_metrics": a.enable_metrics,
        }
        state = {
            **args,
            "pp_max_micro_batch_size": self.pp_cap,
            "effective_max_running_requests_per_dp": self.max_running,
            "last_gen_throughput": 0.0,
        }
        return {
            **args,
            "status": "ready",
            "max_total_num_tokens": min(65536, a.max_total_tokens or 65536) - a.stub_kv_short,
            "internal_states": [state],
            "version": "0.0.0-stub",
        }

    async def chat(self, request):  # type: ignore[no-untyped-def]
        from aiohttp import web

        body = await request.json()
        n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        t0 = time.perf_counter()
        if self.image is not None and not await self.copy_image():
            return web.Response(status=500, text="stub_engine: the SHM copy corrupted the image")
        self.queued += 1
        self.g_queue_l.set(self.queued)
        async with self.slots:
            self.queued -= 1
            self.running += 1
            self.g_queue_l.set(self.queued)
            self.g_running_l.set(self.running)
            try:
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                # Token i is due at start + (i + 1) token times, the stub's stand-in for decode work: a late wake-up
                # (a loaded box) is caught up at the next token instead of adding to every one, so the token time
                # measured is the one given, as a GPU's step time is, whatever else the box runs.
                loop, step = asyncio.get_running_loop(), self.a.stub_token_ms / 1000.0
                start = loop.time()
                for i in range(n):
                    await asyncio.sleep(max(0.0, start + (i + 1) * step - loop.time()))
                    if i == 0:
                        self.ttft_l.observe(time.perf_counter() - t0)
                    if i == 1 and self.a.stub_mode == "crash-mid-load":
                        print("stub_engine: scheduler died mid-load (simulated: CUDA error: an illegal memory "
                              "access was encountered)", file=sys.stderr, flush=True)
                        os._exit(70)
                    chunk = {
                        "id": "stub",
                        "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
                    }
                    await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                usage = {
                    "id": "stub",
                    "choices": [],
                    "usage": {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n},
                }
                await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
                await resp.write_eof()
                return resp
            finally:
                self.running -= 1
                self.g_running_l.set(self.running)

    def app(self):  # type: ignore[no-untyped-def]
        from aiohttp import web
        from prometheus_client import generate_latest

        async def health(_r):  # type: ignore[no-untyped-def]
            return web.Response(text="ok")

        async def info(_r):  # type: ignore[no-untyped-def]
            return web.json_response(self.server_info())

        async def metrics(_r):  # type: ignore[no-untyped-def]
            if not self.a.enable_metrics:
                return web.Response(status=404, text="not found")
            return web.Response(body=generate_latest(self.reg), content_type="text/plain")

        async def flush(_r):  # type: ignore[no-untyped-def]
            if self.running or self.queued:
                return web.Response(status=400, text=f"#running-req={self.running}, #queue-req={self.queued}")
            return web.Response(text="Cache flushed.")

        app = web.Application()
        app.cleanup_ctx.append(self.decode_steps)
        app.router.add_get("/health", health)
        app.router.add_get("/server_info", info)
        app.router.add_get("/metrics", metrics)
        app.router.add_route("*", "/flush_cache", flush)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app


@contextlib.contextmanager
def shm_pool(mib: int):  # type: ignore[no-untyped-def]
    """An SGLang-named segment of ``mib`` MiB, allocated and mapped for the block (unlinked after it)."""
    if mib <= 0:
        yield None
        return
    name = f"sgl_shm_stub_{secrets.token_hex(4)}"
    fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.posix_fallocate(fd, 0, mib << 20)  # ENOSPC now, not SIGBUS on first touch
        with mmap.mmap(fd, mib << 20) as mem:
            print(f"stub_engine: shm pool /dev/shm/{name} ({mib} MiB)", flush=True)
            yield mem
    finally:
        os.close(fd)
        os.unlink(f"/dev/shm/{name}")


def main(argv: list[str] | None = None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    if not (a.model_path / "config.json").is_file():
        print(f"stub_engine: no config.json in {a.model_path}", file=sys.stderr, flush=True)
        return 1
    if a.stub_mode == "crash-before-ready":
        print("stub_engine: simulated crash during model load (RuntimeError: CUDA out of memory)", flush=True)
        return 3
    from engine_fixtures.sglang_plugin.instrument import SCHEDULER_MODULE_ENV, SHM_MODULE_ENV

    # Before the plugin loads here and in the children (spawn passes the environment).
    os.environ[SCHEDULER_MODULE_ENV] = "perf_tests.support.stub_scheduler"
    if a.stub_image_kb > 0:
        os.environ[SHM_MODULE_ENV] = "perf_tests.support.stub_copy"
    with shm_pool(a.stub_shm_mb):
        return serve(a)


def serve(a: argparse.Namespace) -> int:
    _load_plugins()
    ctx = mp.get_context("spawn")
    pipes = []
    schedulers = scheduler_titles(a.pp_size, a.tp_size)
    for title in (*schedulers, "sglang::detokenizer"):
        parent_end, child_end = ctx.Pipe()
        ctx.Process(target=child, args=(title, child_end), daemon=True).start()
        pipes.append(parent_end)
    for conn in pipes:
        conn.recv()  # each child is up and titled
    print("stub_engine: children up", flush=True)
    if a.stub_mode == "never-ready":
        pipes[0].recv()  # blocks forever (until killed): never serves
    if a.stub_mode == "slow-start":
        time.sleep(a.stub_start_s)  # the stand-in for a model load slower than the caller's deadline
    from aiohttp import web

    ignore = a.stub_mode == "ignore-sigterm"
    if ignore:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("stub_engine: ignoring SIGTERM", flush=True)
    print(f"stub_engine: serving on {a.host}:{a.port}", flush=True)
    web.run_app(Stub(a, pipes[:len(schedulers)]).app(), host=a.host, port=a.port, print=None,
                handle_signals=not ignore)
    return 0

if __name__ == "__main__":
    sys.exit(main())
