"""Generate constraints/sglang-cpu-<VERSION>.txt: the exact, dependency-free package set with which SGLang
VERSION's own classes import on a CPU box and the suite's ``sglang``-marked tests run (tox -e sglangXXXX-cpu).

    python scripts/cpu/sglang_constraints.py 0.5.23 [--start constraints/sglang-cpu-0.5.20.txt] [--venv DIR]

Method (what produced the committed files):
1. Start from a known-good set (default: the newest committed one) with ``sglang==VERSION`` and every exact
   pin (``==``) of the release's own Requires-Dist swapped in, except torch/torchvision: a CPU box here has only
   torch 2.14.1 + torchvision 0.29.1 that import together (0.5.16 pins torch 2.11, 0.5.20 2.13, 0.5.23 2.14.1).
2. ``pip install --no-deps`` that set into a fresh venv (resolving with dependencies drags in a CUDA stack).
3. Import every SGLang module the suite touches (IMPORTS); for each ``ModuleNotFoundError`` install that
   module's distribution with --no-deps and retry. Any other import error stops the script with the error:
   pin by hand (e.g. transformers checks the tokenizers version at import) and rerun with --start.
4. ``pip freeze`` the venv into the constraints file. Then run the env (tox -e sglangXXXX-cpu) to prove it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORTS = ("sglang.srt.managers.mm_utils", "sglang.srt.environ", "sglang.srt.server_args", "sglang.srt.plugins",
           "engine_fixtures.transport.sglang_compat")
KEEP = {"torch", "torchvision"}  # the CPU box's pair, whatever the release pins
DIST_OF = {"PIL": "pillow", "yaml": "PyYAML", "zmq": "pyzmq", "IPython": "ipython", "tvm_ffi": "apache-tvm-ffi",
           "google": "protobuf", "cv2": "opencv-python-headless", "dateutil": "python-dateutil",
           "sklearn": "scikit-learn", "multipart": "python-multipart", "jwt": "PyJWT"}
NAME = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)$")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_set(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if (m := NAME.match(line.strip())) is not None:
            pins[m[1]] = m[2]
    return pins


def release_pins(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    pins = {}
    for line in text.splitlines():
        m = re.match(r"Requires-Dist: ([A-Za-z0-9_.\-]+)(?:\[[^]]*\])?==([^;\s]+)\s*$", line)
        if m:
            pins[m[1]] = m[2]
    return pins


def pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", *args], check=True)


def missing_module(python: Path) -> str | None:
    code = "import importlib, warnings\nwarnings.simplefilter('ignore')\n" + "".join(
        f"importlib.import_module({m!r})\n" for m in IMPORTS)
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode == 0:
        return None
    m = re.search(r"ModuleNotFoundError: No module named '([^'.]+)", proc.stderr)
    if m is None:
        sys.exit(f"import failed with something other than a missing module; pin by hand:\n{proc.stderr[-3000:]}")
    return m[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("version")
    ap.add_argument("--start", type=Path, default=None)
    ap.add_argument("--venv", type=Path, default=None)
    a = ap.parse_args()
    start = (a.start or max(ROOT.glob("constraints/sglang-cpu-*.txt"))).resolve()
    env_dir = a.venv or Path(f"/tmp/sglang-cpu-{a.version}")
    wheels = env_dir.with_name(env_dir.name + "-wheel")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                    f"sglang=={a.version}"], check=True)
    pins = read_set(start)
    pins = {k: v for k, v in pins.items() if norm(k) != "sglang"}
    by_norm = {norm(k): k for k in pins}
    for dist, ver in release_pins(next(wheels.glob(f"sglang-{a.version}-*.whl"))).items():
        if norm(dist) in by_norm and norm(dist) not in KEEP:
            pins[by_norm[norm(dist)]] = ver
    pins["sglang"] = a.version
    venv.create(env_dir, with_pip=True, clear=True)
    python = env_dir / "bin" / "python"
    reqs = env_dir / "requirements.txt"
    reqs.write_text("".join(f"{k}=={v}\n" for k, v in sorted(pins.items(), key=lambda kv: norm(kv[0]))))
    pip(python, "-r", str(reqs))
    pip(python, "-e", str(ROOT))
    for _ in range(40):
        module = missing_module(python)
        if module is None:
            break
        print(f"missing module {module}: installing {DIST_OF.get(module, module)}", flush=True)
        pip(python, DIST_OF.get(module, module))
    else:
        sys.exit("still missing modules after 40 installs")
    frozen = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude-editable"], capture_output=True,
                            text=True, check=True).stdout
    out = ROOT / "constraints" / f"sglang-cpu-{a.version}.txt"
    out.write_text(f"# Exact, dependency-free install set for SGLang {a.version}'s own classes on a CPU box "
                   f"(tox -e sglang{a.version.replace('.', '')}-cpu).\n# Generated by scripts/cpu/"
                   f"sglang_constraints.py {a.version} --start {start.relative_to(ROOT)}; see its docstring.\n"
                   + frozen)
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
