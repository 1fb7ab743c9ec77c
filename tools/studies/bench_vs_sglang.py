"""Proof of speed: this load generator vs ``python -m sglang.bench_serving`` against the same zero-work
stub, in one run, interleaved, the stub pinned to one core and each client to another.

Both clients are judged the same way from the stub's side (``GET /stub/stats``): steady-state
throughput over the middle 80% of completions, and the server-observed scheduling delay (closed loop
at C: arrival k+C minus completion k, i.e. how long a freed slot stayed empty). Each client's own
figures are printed too.

    python -m tools.studies.bench_vs_sglang --concurrency 256 --num-requests 4000

Needs SGLang's client in a side venv (default /work/venv-bench; see ``INSTALL``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from engine_fixtures.errors import MeasurementError
from engine_fixtures.loadgen import WorkloadSpec, run_load
from perf_tests.support.stub_process import stub_server

DEFAULT_VENV = Path("/work/venv-bench")
INSTALL = (
    "python -m venv /work/venv-bench && /work/venv-bench/bin/pip install --no-deps sglang==0.5.16 && "
    "/work/venv-bench/bin/pip install aiohttp numpy requests tqdm transformers==5.12.1 orjson psutil pybase64 "
    "torch torchvision starlette IPython datasets pyzmq msgspec openai partial_json_parser xgrammar "
    "sentencepiece einops compressed_tensors gguf pillow"
)
_TOKENIZER_CODE = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"[UNK]": 0, "[EOS]": 1, **{f"w{i}": i + 2 for i in range(2000)}}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]").save_pretrained(sys.argv[1])
"""
STATS_TIMEOUT_S = 10.0
BENCH_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ServerView:
    """One client's run as the stub saw it."""

    requests_per_s: float
    sched_delay_p50_ms: float
    sched_delay_p99_ms: float
    completed: int


@dataclass(frozen=True)
class Round:
    client: str
    server: ServerView
    client_requests_per_s: float
    client_sched_delay_p99_ms: float | None


def side_venv_problem(venv: Path) -> str | None:
    """None if ``sglang.bench_serving`` imports in ``venv``, else why not and how to fix it."""
    python = venv / "bin" / "python"
    if not python.exists():
        return f"no side venv at {venv}; install SGLang's client with: {INSTALL}"
    probe = subprocess.run(
        [str(python), "-c", "import sglang.benchmark.serving"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    if probe.returncode != 0:
        return f"sglang.bench_serving does not import in {venv}: {probe.stderr.strip()[-400:]}; fix with: {INSTALL}"
    return None


def server_view(url: str, concurrency: int) -> ServerView:
    with urllib.request.urlopen(f"{url}/stub/stats", timeout=STATS_TIMEOUT_S) as resp:
        stats = json.loads(resp.read())
    arrivals, completions = np.sort(stats["arrivals"]), np.sort(stats["completions"])
    n = len(completions)
    if n < max(20, 2 * concurrency):
        raise MeasurementError(f"the stub saw only {n} completions; send more requests than 2 x concurrency")
    lo, hi = n // 10, n - n // 10
    rate = (hi - 1 - lo) / (completions[hi - 1] - completions[lo])
    k = np.arange(lo, min(hi, len(arrivals) - concurrency))
    delay_ms = (arrivals[k + concurrency] - completions[k]) * 1000.0
    p50, p99 = np.percentile(delay_ms, [50, 99])
    return ServerView(float(rate), float(p50), float(p99), n)


def ours(url: str, args: argparse.Namespace) -> Round:
    spec = WorkloadSpec(
        num_requests=args.num_requests,
        concurrency=args.concurrency,
        warmup_requests=args.concurrency,
        images_per_request=0,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
    )
    report = run_load(url, spec, cpus=[args.client_cpu])
    return Round(
        "engine_fixtures.loadgen",
        server_view(url, args.concurrency),
        report.requests_per_s,
        report.scheduling_delay.p99,
    )


def bench_command(url: str, args: argparse.Namespace, tokenizer: Path, out: Path) -> list[str]:
    port = url.rsplit(":", 1)[1]
    return [
        "taskset",
        "-c",
        str(args.client_cpu),
        str(args.venv / "bin" / "python"),
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang-oai-chat",
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        str(args.input_tokens),
        "--random-output-len",
        str(args.output_tokens),
        "--random-range-ratio",
        "1",
        "--tokenizer",
        str(tokenizer),
        "--model",
        str(tokenizer),
        "--max-concurrency",
        str(args.concurrency),
        "--num-prompts",
        str(args.num_requests),
        "--warmup-requests",
        "16",
        "--disable-tqdm",
        "--output-file",
        str(out),
    ]


def theirs(url: str, args: argparse.Namespace, tokenizer: Path, workdir: Path) -> Round:
    out = workdir / "bench_serving.jsonl"
    out.unlink(missing_ok=True)
    cmd = bench_command(url, args, tokenizer, out)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S, env=dict(os.environ, HF_HUB_OFFLINE="1")
    )
    if proc.returncode != 0 or not out.exists():
        raise MeasurementError(
            f"sglang.bench_serving failed ({proc.returncode}): {proc.stdout[-800:]}{proc.stderr[-800:]}"
        )
    result = json.loads(out.read_text().splitlines()[-1])
    if result["completed"] != args.num_requests:
        raise MeasurementError(f"sglang.bench_serving completed {result['completed']} of {args.num_requests}")
    return Round("sglang.bench_serving", server_view(url, args.concurrency), float(result["request_throughput"]), None)


def compare(args: argparse.Namespace, console: Console) -> dict[str, float]:
    """Run ``args.rounds`` interleaved rounds; print a table; return the median ratios."""
    with tempfile.TemporaryDirectory(prefix="bench-vs-sglang-") as tmp:
        workdir = Path(tmp)
        tokenizer = workdir / "tokenizer"
        subprocess.run(
            [str(args.venv / "bin" / "python"), "-c", _TOKENIZER_CODE, str(tokenizer)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        rounds: list[Round] = []
        with stub_server(cpu=args.stub_cpu) as stub:
            with urllib.request.urlopen(f"{stub.url}/stub/stats", timeout=STATS_TIMEOUT_S):
                pass  # clears the stub's counters
            for i in range(args.rounds):
                pair = [lambda: ours(stub.url, args), lambda: theirs(stub.url, args, tokenizer, workdir)]
                for run in pair if i % 2 == 0 else pair[::-1]:
                    rounds.append(run())
            console.print(
                f"[bold]commands[/bold] (stub: python -m perf_tests.support.stub_server --cpu {args.stub_cpu}):"
            )
            console.print(
                "  ours:   run_load(url, WorkloadSpec(num_requests="
                f"{args.num_requests}, concurrency={args.concurrency}, warmup_requests={args.concurrency}, "
                f"images_per_request=0, input_tokens={args.input_tokens}, output_tokens={args.output_tokens}),"
                f" cpus=[{args.client_cpu}])"
            )
            console.print(
                "  theirs: HF_HUB_OFFLINE=1 "
                + shlex.join(bench_command(stub.url, args, tokenizer, workdir / "out.jsonl"))
            )
    table = Table(title=f"C={args.concurrency}, {args.num_requests} requests, {args.output_tokens} output tokens")
    for col in (
        "client",
        "server-side req/s",
        "server sched delay p50 ms",
        "p99 ms",
        "client req/s",
        "client sched delay p99 ms",
    ):
        table.add_column(col, no_wrap=col == "client")
    for r in rounds:
        own = f"{r.client_sched_delay_p99_ms:.3f}" if r.client_sched_delay_p99_ms is not None else "n/a"
        table.add_row(
            r.client,
            f"{r.server.requests_per_s:.0f}",
            f"{r.server.sched_delay_p50_ms:.3f}",
            f"{r.server.sched_delay_p99_ms:.3f}",
            f"{r.client_requests_per_s:.0f}",
            own,
        )
    console.print(table)

    def med(name: str, attr: str) -> float:
        return statistics.median(getattr(r.server, attr) for r in rounds if r.client == name)

    a, b = "engine_fixtures.loadgen", "sglang.bench_serving"
    result = {
        "ratio_requests_per_s": med(a, "requests_per_s") / med(b, "requests_per_s"),
        "ours_server_sched_delay_p99_ms": med(a, "sched_delay_p99_ms"),
        "theirs_server_sched_delay_p99_ms": med(b, "sched_delay_p99_ms"),
        "ours_client_sched_delay_p99_ms": statistics.median(
            r.client_sched_delay_p99_ms for r in rounds if r.client == a and r.client_sched_delay_p99_ms is not None
        ),
    }
    console.print(result)
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--num-requests", type=int, default=4000)
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--client-cpu", type=int, default=0)
    parser.add_argument("--stub-cpu", type=int, default=1)
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = side_venv_problem(args.venv)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    compare(args, Console())
    return 0


if __name__ == "__main__":
    sys.exit(main())
