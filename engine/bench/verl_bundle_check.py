"""Checks the verl bundle (device_verl_prep.sh) before it travels: every Requires-Dist of every package in it (no
extras; markers for CPython 3.12 on Linux x86-64) is met by a package of the bundle, at a version that fits, or by
the device image (KINDS.md's package list; versions where one was recorded). Left-out requirements that were
decided on (device_verl_prep.sh's header says why) are listed, not failed; anything else missing fails.

    python3 engine/bench/verl_bundle_check.py WHEELS_DIR [UNPACKED_SITE_DIR]
"""
from __future__ import annotations

import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "platform_machine": "x86_64",
       "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}

# The device image ('cuda', KINDS.md, read 2026-11-17); versions where a session recorded them, else None.
IMAGE_VERSIONS = {
    "accelerate": "1.15.0", "huggingface-hub": "1.33.0", "numpy": "2.5.2", "safetensors": "0.8.0",
    "sentencepiece": "0.2.2", "tiktoken": "0.14.0", "tokenizers": "0.23.2", "torch": "2.11.0",
    "torchaudio": "2.11.0", "torchvision": "0.26.0", "transformers": "5.17.0", "triton": "3.6.0",
    "cupy-cuda13x": "14.2.0", "onnxscript": "0.7.2",
}
IMAGE = set(IMAGE_VERSIONS) | {canonicalize_name(n) for n in """
absl-py aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs build certifi charset-normalizer click
cloudpickle cmake colorama einops filelock frozenlist fsspec grpcio h11 hf-xet httpcore httpx idna jinja2 joblib
lxml markdown markdown-it-py markupsafe mdurl ml-dtypes mpmath msgpack multidict networkx ninja numba
nvidia-ml-py opencv-python-headless packaging pandas peft pillow pip pluggy prometheus-client propcache protobuf
psutil py-cpuinfo pyarrow pybind11 pygments pyparsing python-dateutil pyyaml regex requests rich scipy setuptools
six sympy tabulate tensorboard tqdm typer typing-extensions urllib3 uvloop wheel wrapt xxhash yarl zipp
""".split()}

# Required by some package of the bundle, not imported on verl's PPO/GRPO path (device_verl_prep.sh says why).
LEFT_OUT = {canonicalize_name(n) for n in """
flash-attn wandb pylatexenc flashinfer-python flashinfer-cubin tilelang nvidia-cudnn-frontend fastsafetensors
nvidia-cutlass-dsl quack-kernels tokenspeed-mla humming-kernels anthropic mcp opentelemetry-exporter-otlp
supervisor mbridge aiohttp-cors colorful opencensus py-spy smart-open virtualenv
""".split()}
# Bundle versions that knowingly break a pin, with the reason (device_verl_prep.sh's header).
ACCEPTED = {("vllm", "apache-tvm-ffi"): "xgrammar 0.2.8 needs tvm-ffi >= 0.1.15 (seen on the device)",
            ("mistral-common", "numpy"): "the image's numpy 2.5.2 ran vLLM 0.26 with mistral_common 1.13.1 "
                                         "(device_vllm_prep.sh, 2026-12-06)"}


def metadata(text: str) -> tuple[str, str, list[str]]:
    msg = Parser().parsestr(text)
    return canonicalize_name(msg["Name"]), msg["Version"], msg.get_all("Requires-Dist") or []


def collect(wheels: Path, site: Path | None) -> dict[str, tuple[str, list[str]]]:
    found: dict[str, tuple[str, list[str]]] = {}
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            name, version, reqs = metadata(z.read(meta).decode())
        if name in found:
            raise SystemExit(f"two versions of {name} in the bundle: pip install stops on that")
        found[name] = (version, reqs)
    if site:
        for meta in site.glob("*.dist-info/METADATA"):
            name, version, reqs = metadata(meta.read_text())
            found[name] = (version, reqs)
    return found


def check(found: dict[str, tuple[str, list[str]]]) -> tuple[list[str], list[str]]:
    problems, notes = [], []
    for pkg, (_, reqs) in sorted(found.items()):
        for line in reqs:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(ENV):
                continue  # an extra, or another Python/platform
            dep = canonicalize_name(req.name)
            if dep in found:
                have = found[dep][0]
                if req.specifier and not req.specifier.contains(Version(have), prereleases=True):
                    why = ACCEPTED.get((pkg, dep))
                    (notes if why else problems).append(f"{pkg} needs {line!r}, bundle has {dep} {have}"
                                                        + (f" (accepted: {why})" if why else ""))
            elif dep in IMAGE:
                have = IMAGE_VERSIONS.get(dep)
                if have and req.specifier and not req.specifier.contains(Version(have), prereleases=True):
                    why = ACCEPTED.get((pkg, dep))
                    (notes if why else problems).append(f"{pkg} needs {line!r}, the image has {dep} {have}"
                                                        + (f" (accepted: {why})" if why else ": carry it"))
            elif dep in LEFT_OUT:
                notes.append(f"{pkg} needs {dep}: left out (not on the path)")
            else:
                problems.append(f"{pkg} needs {line!r}: neither in the bundle nor in the image")
    return problems, notes


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    found = collect(Path(argv[0]), Path(argv[1]) if len(argv) > 1 else None)
    problems, notes = check(found)
    for n in sorted(set(notes)):
        print("note:", n)
    for p in problems:
        print("MISSING:", p)
    print(f"verl bundle: {len(found)} packages, {len(problems)} unmet requirement(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
